"""The SQL has one home (inventory/sql/): a database migrated step by step, as every test database
is, defines exactly the functions of the current schema files, the tables, constraints and indexes
the models declare and the triggers of the numbered SQL files; and the status lists the SQL uses
are the ones the Python code uses. (tests/sql/test_migration_upgrade.py: a database of the old
migration chain upgrades to the same schema.)"""

import re

import pytest
from django.apps import apps
from django.db import connection

from inventory import models
from inventory.sql import SCHEMA_FILES, SQL_DIR, query, schema_sql
from tests.support.schema_catalog import catalog, differences

pytestmark = pytest.mark.django_db

SCRATCH = "tidemark_schema_check"


def _functions(cursor, schema: str) -> dict[str, str]:
    """signature -> definition of every tidemark_* function in `schema`, schema name removed."""
    return {
        signature: definition
        for signature, definition in catalog(cursor, schema)["functions"].items()
        if signature.startswith("tidemark_")
    }


def test_a_database_migrated_step_by_step_defines_exactly_the_current_functions():
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (live_schema,) = cursor.fetchone()
        cursor.execute(f"CREATE SCHEMA {SCRATCH}")
        # the scratch schema first: the current files create their functions there, and their
        # bodies still resolve the tables of the migrated schema
        cursor.execute(f"SET LOCAL search_path TO {SCRATCH}, {live_schema}")
        cursor.execute(schema_sql())
        current = _functions(cursor, SCRATCH)
        migrated = _functions(cursor, live_schema)
    assert current, "the schema files define no function"
    assert sorted(migrated) == sorted(current)
    for signature, definition in current.items():
        assert migrated[signature] == definition, f"{signature} differs from inventory/sql/schema/"


MODEL_KINDS = ("tables", "constraints", "indexes")


def _inventory(snapshot: dict) -> dict:
    """The tables, constraints and indexes of inventory's tables (the other apps' migrations are
    theirs)."""
    return {
        kind: {
            name: value for name, value in snapshot[kind].items() if name.startswith("inventory_")
        }
        for kind in MODEL_KINDS
    }


def test_a_database_migrated_step_by_step_has_the_tables_constraints_and_indexes_of_the_models():
    """The models' own DDL (Django's schema editor creating every model afresh, in a scratch
    schema) against the migrated database: a migration that forgot or dropped a column, a
    constraint or an index, or left a table or an index behind, fails here."""
    with connection.cursor() as cursor:
        migrated = catalog(cursor)
        cursor.execute(f"CREATE SCHEMA {SCRATCH}")
        cursor.execute(f"SET LOCAL search_path TO {SCRATCH}")
        with connection.schema_editor() as editor:
            for model in apps.get_models():
                if model._meta.managed and not model._meta.proxy:
                    editor.create_model(model)
        declared = catalog(cursor, SCRATCH)
        cursor.execute("SET LOCAL search_path TO DEFAULT")
    assert len(_inventory(declared)["tables"]) >= 10, "the models' tables were not created"
    found = differences(_inventory(migrated), _inventory(declared))
    assert found == [], "migrated (left) and declared by the models (right):\n" + "\n".join(found)


def _triggers_of_the_sql_files() -> dict[str, str]:
    """table.trigger -> the numbered file that last created it, replaying the files in order."""
    created = re.compile(
        r"^CREATE (?:OR REPLACE )?TRIGGER (\w+)\s.*?\sON (\w+)", re.MULTILINE | re.DOTALL
    )
    dropped = re.compile(r"^DROP TRIGGER (?:IF EXISTS )?(\w+) ON (\w+)", re.MULTILINE)
    triggers = {}
    for path in sorted((SQL_DIR / "migrations").glob("[0-9]*.sql")):
        text = path.read_text()
        events = [(m.start(), "create", m) for m in created.finditer(text)]
        events += [(m.start(), "drop", m) for m in dropped.finditer(text)]
        for _, event, match in sorted(events, key=lambda event: event[0]):
            name, table = match.groups()
            if event == "create":
                triggers[f"{table}.{name}"] = path.name
            else:
                triggers.pop(f"{table}.{name}", None)
    return triggers


def test_a_database_migrated_step_by_step_has_exactly_the_triggers_of_the_sql_files():
    expected = _triggers_of_the_sql_files()
    assert expected, "the numbered SQL files create no trigger"
    with connection.cursor() as cursor:
        migrated = catalog(cursor)
    assert sorted(migrated["triggers"]) == sorted(expected)
    functions = {signature.split("(")[0] for signature in migrated["functions"]}
    for name, definition in migrated["triggers"].items():
        called = re.search(r"EXECUTE FUNCTION (\w+)\(", definition).group(1)
        assert called in functions, f"{name} calls {called}, which does not exist"


STATUS_LISTS = {
    "tidemark_holding_statuses": models.HOLDING_STATUSES,
    "tidemark_committed_statuses": models.COMMITTED_STATUSES,
    "tidemark_open_statuses": models.OPEN_STATUSES,
    "tidemark_output_statuses": models.OUTPUT_STATUSES,
    "tidemark_backfill_done_statuses": models.BACKFILL_DONE_STATUSES,
    "tidemark_retired_statuses": models.RETIRED_STATUSES,
}


@pytest.mark.parametrize("function", sorted(STATUS_LISTS))
def test_the_status_lists_in_sql_are_the_python_ones(function):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}()")
        (in_sql,) = cursor.fetchone()
    assert in_sql == [str(status) for status in STATUS_LISTS[function]]


def test_the_python_status_lists_name_real_statuses():
    for statuses in STATUS_LISTS.values():
        assert set(statuses) <= set(models.BatchStatus.values)


def test_no_function_spells_a_status_list_out():
    listed = re.compile(
        r"IN\s*\(\s*'(" + "|".join(models.BatchStatus.values) + r")'", re.IGNORECASE
    )
    for name in SCHEMA_FILES:
        if name == "statuses.sql":
            continue
        text = (SQL_DIR / "schema" / name).read_text()
        assert not listed.search(text), f"schema/{name} spells a status list out"


def test_due_is_judged_by_the_database_clock():
    """Queued with no backoff or past it, or failed with its backoff over: due; nothing else."""
    cases = [
        ("queued", "NULL", True),
        ("queued", "statement_timestamp() - interval '1 second'", True),
        ("queued", "statement_timestamp() + interval '1 minute'", False),
        ("failed", "statement_timestamp() - interval '1 second'", True),
        ("failed", "statement_timestamp() + interval '1 minute'", False),
        ("failed", "NULL", False),
        ("running", "NULL", False),
        ("dead", "NULL", False),
    ]
    with connection.cursor() as cursor:
        for status, next_attempt_at, due in cases:
            cursor.execute(f"SELECT tidemark_batch_due(%s, {next_attempt_at})", [status])
            assert bool(cursor.fetchone()[0]) is due, (status, next_attempt_at)


def test_every_named_query_is_used_and_every_used_name_exists():
    text = (SQL_DIR / "queries.sql").read_text()
    names = re.findall(r"^-- name: (\w+)", text, re.MULTILINE)
    assert len(names) == len(set(names))
    code = "\n".join(
        path.read_text()
        for path in (SQL_DIR.parent).rglob("*.py")
        if "migrations" not in path.parts
    )
    used = set(re.findall(r"\bquery\(\"(\w+)\"\)", code))
    assert used == set(names)
    for name in names:
        assert query(name)


def test_the_numbered_sql_files_are_each_applied_by_one_migration():
    applied = "\n".join(
        path.read_text() for path in (SQL_DIR.parent / "migrations").glob("[0-9]*.py")
    )
    for path in (SQL_DIR / "migrations").glob("*.sql"):
        assert applied.count(f'"{path.name}"') == 1, path.name


def test_no_move_leads_from_a_retired_status_back_to_running():
    """The fence removes a retired batch's unrecorded output: it must never publish again."""
    from inventory.models.moves import BATCH_MOVES

    reached = {str(status) for status in models.RETIRED_STATUSES}
    while True:
        more = {to for frm, to in BATCH_MOVES if frm in reached} - reached
        if not more:
            break
        reached |= more
    assert str(models.BatchStatus.RUNNING) not in reached
