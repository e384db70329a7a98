"""A local meta table never reaches a function that could read Tidemark's data (issue 42, item 5).

The source check followed a view's rules to the relations and functions they name, but not to
the functions behind what they use: a SECURITY DEFINER function behind a user-defined operator
in a view passed, and a viewer read every API token through a batch's items (the function runs
with its owner's rights, whatever role reads the view). Casts, domains with CHECK functions, row
security policies, index expressions and aggregates are the same class. The check now follows
every dependency a read can reach (inventory/sources/identity.py) and refuses any function that
is not built in; it runs on every read (no verdict is remembered, DDL can change it), and lag and
item bounds read the table as the reader role, as a batch's items are read.
"""

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token

from inventory.models import Connector
from inventory.services import lifecycle
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_create
from tests.support.api_support import token_client

pytestmark = pytest.mark.django_db

# a function reading every API token, running as its owner (Tidemark's own database role)
LEAK = """
CREATE FUNCTION {name}({args}) RETURNS {returns} LANGUAGE sql {volatility} SECURITY DEFINER AS $$
    SELECT {body}
$$;
"""
TOKENS = "(SELECT string_agg(key, ',') FROM authtoken_token)"

ATTACKS = {
    # a view whose item column comes out of a user-defined operator
    "operator": (
        LEAK.format(
            name="leak_op", args="bigint, bigint", returns="text", volatility="", body=TOKENS
        )
        + "CREATE OPERATOR #^# (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = leak_op);"
        "CREATE VIEW attack_meta AS SELECT uid, uid #^# uid AS item, weight FROM attack_base;",
        "public.leak_op",
    ),
    # a view casting to a type whose cast runs a function
    "cast": (
        "CREATE TYPE attack_wrap AS (v text);"
        + LEAK.format(
            name="leak_cast",
            args="bigint",
            returns="attack_wrap",
            volatility="",
            body=f"ROW({TOKENS})::attack_wrap",
        )
        + "CREATE CAST (bigint AS attack_wrap) WITH FUNCTION leak_cast(bigint);"
        "CREATE VIEW attack_meta AS "
        "SELECT uid, (uid::attack_wrap).v AS item, weight FROM attack_base;",
        "public.leak_cast",
    ),
    # a view casting to a domain whose CHECK calls a function
    "domain": (
        LEAK.format(
            name="leak_check",
            args="text",
            returns="boolean",
            volatility="",
            body=f"{TOKENS} IS NOT NULL",
        )
        + "CREATE DOMAIN attack_text AS text CHECK (leak_check(VALUE));"
        "CREATE VIEW attack_meta AS SELECT uid, item::attack_text AS item, weight FROM attack_base;",
        "public.leak_check",
    ),
    # the table itself, under a row security policy calling a function
    "policy": (
        LEAK.format(
            name="leak_policy",
            args="bigint",
            returns="boolean",
            volatility="",
            body=f"{TOKENS} IS NOT NULL",
        )
        + "ALTER TABLE attack_base ENABLE ROW LEVEL SECURITY;"
        "CREATE POLICY attack_rows ON attack_base USING (leak_policy(uid));"
        "CREATE VIEW attack_meta AS SELECT * FROM attack_base;",
        "public.leak_policy",
    ),
    # an index expression over the table
    "index": (
        LEAK.format(
            name="leak_index", args="bigint", returns="bigint", volatility="IMMUTABLE", body="$1"
        )
        + "CREATE INDEX attack_base_leak ON attack_base (leak_index(uid));"
        "CREATE VIEW attack_meta AS SELECT * FROM attack_base;",
        "public.leak_index",
    ),
    # a view aggregating with a user-defined aggregate
    "aggregate": (
        LEAK.format(
            name="leak_step",
            args="text, bigint",
            returns="text",
            volatility="",
            body=TOKENS,
        )
        + "CREATE AGGREGATE attack_agg(bigint) (SFUNC = leak_step, STYPE = text);"
        "CREATE VIEW attack_meta AS SELECT uid, "
        "(SELECT attack_agg(b.uid) FROM attack_base b) AS item, weight FROM attack_base;",
        "public.attack_agg",
    ),
}


@pytest.fixture
def tokens(role_users):
    Token.objects.create(user=role_users["admin"])
    Token.objects.create(user=role_users["viewer"])
    return set(Token.objects.values_list("key", flat=True))


def _base():
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE attack_base (uid bigint PRIMARY KEY, item text, weight bigint);"
            "INSERT INTO attack_base VALUES (1, 'a', 1), (2, 'b', 1);"
            "GRANT SELECT ON attack_base TO tidemark_reader;"
        )


def _attack(kind: str) -> str:
    sql, function = ATTACKS[kind]
    with connection.cursor() as cursor:
        cursor.execute(sql)
        cursor.execute("GRANT SELECT ON attack_meta TO tidemark_reader")
    return function


@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_a_meta_table_reaching_a_function_is_refused_naming_it(role_users, tokens, kind):
    _base()
    function = _attack(kind)
    api = token_client(role_users["admin"])
    response = api.post(
        "/api/v1/connectors/",
        {"name": "attack", "kind": "files", "config": {"meta_table": {"table": "attack_meta"}}},
        format="json",
    )
    assert response.status_code == 400, response.content
    reason = str(response.json()["config.meta_table.table"])
    assert function in reason and "reaches the function" in reason, reason
    assert not any(token in response.content.decode() for token in tokens)
    assert not Connector.objects.filter(name="attack").exists()


def test_a_plain_table_and_a_view_over_tables_are_still_sources(role_users):
    _base()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE VIEW plain_meta AS SELECT uid, upper(item) AS item, weight FROM attack_base "
            "WHERE uid > 0;"
            "GRANT SELECT ON plain_meta TO tidemark_reader;"
        )
    api = token_client(role_users["admin"])
    for name, table in (("plain-table", "attack_base"), ("plain-view", "plain_meta")):
        response = api.post(
            "/api/v1/connectors/",
            {"name": name, "kind": "files", "config": {"meta_table": {"table": table}}},
            format="json",
        )
        assert response.status_code == 201, response.content


def test_a_view_changed_after_the_check_is_refused_at_every_read(role_users, tokens):
    """DDL can turn a checked view into an attack at any time: planning, a batch's items and lag
    check it again each time (nothing remembered), and a viewer never reads a token."""
    _base()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE VIEW attack_meta AS SELECT * FROM attack_base;"
            "GRANT SELECT ON attack_meta TO tidemark_reader;"
        )
    connector = Connector.objects.create(
        name="later",
        kind="files",
        config={"meta_table": {"table": "attack_meta", "visibility": "none"}},
    )
    job = job_create(name="later-job", connector=connector, batch_weight=100)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    viewer = token_client(role_users["viewer"])
    assert viewer.get(f"/api/v1/batches/{batch.pk}/items/").status_code == 200

    with connection.cursor() as cursor:
        cursor.execute("DROP VIEW attack_meta")
    _attack("operator")
    response = viewer.get(f"/api/v1/batches/{batch.pk}/items/")
    assert response.status_code == 400, response.content
    assert "leak_op" in response.content.decode()
    assert not any(token in response.content.decode() for token in tokens)
    with pytest.raises(InvalidInput, match="leak_op"):
        lifecycle.batches_plan(job=job, limit=1)
    page = viewer.get(f"/api/v1/jobs/{job.name}/")
    assert not any(token in page.content.decode() for token in tokens)


def test_lag_and_item_bounds_read_a_meta_table_as_the_reader_role(role_users):
    """A table the reader role may not read is not counted as Tidemark's own role (which may)."""
    from inventory import selectors

    _base()
    connector = Connector.objects.create(
        name="lagged", kind="files", config={"meta_table": {"table": "attack_base"}}
    )
    job = job_create(name="lagged-job", connector=connector, batch_weight=100)
    assert selectors.job_lag(job=job) is not None
    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert selectors.batches_item_bounds(job=job, batches=[batch])
    with connection.cursor() as cursor:
        cursor.execute("REVOKE SELECT ON attack_base FROM tidemark_reader")
    assert selectors.job_lag(job=job) is None
    with pytest.raises(InvalidInput, match="GRANT SELECT"):
        selectors.batches_item_bounds(job=job, batches=[batch])
