"""Local meta tables are read as tidemark_reader (issue 17, item 6): the own-table rule cannot be
bypassed through a function, and the database is the last line behind the check."""

import pytest
from django.apps import apps
from django.db import connection
from rest_framework.authtoken.models import Token

from inventory.models import Connector
from inventory.services import lifecycle
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_create
from inventory.sources.items import READER_ROLE, fetch_items, meta_table_source
from tests.support.api_support import token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def token_view(role_users):
    """A view over a SQL function that reads authtoken_token, as an intruder with database access
    would build it; SELECT on the view even granted to the reader role."""
    Token.objects.create(user=role_users["admin"])
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION leak_tokens() RETURNS TABLE (uid bigint, item text, weight bigint)
            LANGUAGE sql AS $$
                SELECT row_number() OVER ()::bigint, key::text, 1::bigint FROM authtoken_token
            $$;
            CREATE VIEW harmless_meta AS SELECT * FROM leak_tokens();
            GRANT SELECT ON harmless_meta TO tidemark_reader;
            """
        )
    return "harmless_meta"


def test_the_role_exists_cannot_log_in_and_reads_none_of_tidemarks_tables():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolcanlogin, rolsuper, pg_has_role(current_user, oid, 'MEMBER') "
            "FROM pg_roles WHERE rolname = %s",
            [READER_ROLE],
        )
        assert cursor.fetchone() == (False, False, True)
        tables = [m._meta.db_table for m in apps.get_models(include_auto_created=True)]
        cursor.execute(
            "SELECT t FROM unnest(%s::text[]) AS t "
            "WHERE has_table_privilege(%s, quote_ident(t), 'SELECT, INSERT, UPDATE, DELETE')",
            [tables, READER_ROLE],
        )
        assert cursor.fetchall() == []


def test_a_view_over_a_function_reading_tokens_is_refused_by_the_check(role_users, token_view):
    api = token_client(role_users["admin"])
    response = api.post(
        "/api/v1/connectors/",
        {"name": "sneaky", "kind": "files", "config": {"meta_table": {"table": token_view}}},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "leak_tokens" in str(response.json()["config.meta_table.table"])


def test_behind_the_check_the_database_refuses_the_read(token_view):
    source = meta_table_source({"table": token_view})  # built without the check
    sql, params = source.select(lower=0, upper=None, limit=None)
    with pytest.raises(InvalidInput) as caught:
        fetch_items(source, sql, params)
    assert "authtoken_token" in caught.value.message or "permission denied" in caught.value.message
    keys = set(Token.objects.values_list("key", flat=True))
    assert not any(key in caught.value.message for key in keys)
    # the connection is Tidemark's own again afterwards
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user = session_user")
        assert cursor.fetchone()[0] is True


def test_a_granted_meta_table_is_read_and_an_ungranted_one_names_the_grant():
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE granted_meta (uid bigint PRIMARY KEY, item text, weight bigint);"
            "INSERT INTO granted_meta VALUES (1, 'a', 1), (2, 'b', 1);"
            "GRANT SELECT ON granted_meta TO tidemark_reader;"
            "CREATE TABLE private_meta (uid bigint PRIMARY KEY, item text, weight bigint);"
        )
    source = meta_table_source({"table": "granted_meta"})
    sql, params = source.select(lower=0, upper=None, limit=None)
    assert [row[2] for row in fetch_items(source, sql, params)] == ["a", "b"]
    private = meta_table_source({"table": "private_meta"})
    sql, params = private.select(lower=0, upper=None, limit=None)
    with pytest.raises(InvalidInput) as caught:
        fetch_items(private, sql, params)
    assert 'GRANT SELECT ON "private_meta" TO tidemark_reader' in caught.value.message


def test_viewers_never_read_tokens_at_batch_items(role_users, token_view):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE plain_meta (uid bigint PRIMARY KEY, item text, weight bigint);"
            "INSERT INTO plain_meta VALUES (1, 'a', 1), (2, 'b', 1);"
            "GRANT SELECT ON plain_meta TO tidemark_reader;"
        )
    connector = Connector.objects.create(
        name="old-sneaky", kind="files", config={"meta_table": {"table": "plain_meta"}}
    )
    job = job_create(name="old-sneaky-job", connector=connector, batch_weight=100)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    # re-pointed at the view by someone with database access, past every API check
    Connector.objects.filter(pk=connector.pk).update(config={"meta_table": {"table": token_view}})
    keys = set(Token.objects.values_list("key", flat=True))
    response = token_client(role_users["viewer"]).get(f"/api/v1/batches/{batch.pk}/items/")
    assert response.status_code == 400, response.content
    assert not any(key in response.content.decode() for key in keys)
