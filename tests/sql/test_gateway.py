"""One module sends SQL to Tidemark's database: inventory/sql/gateway.py. Every other module
calls its typed functions; the scan below fails when one runs a statement itself (a cursor of
Django's connection, `cursor.execute`, a raw queryset), outside the few modules listed with the
reason they are something else. The SQLSTATE -> domain error table is tested here too."""

import ast
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DatabaseError, DataError, connection

from inventory.services.errors import Conflict, InvalidInput, NotFound
from inventory.sql import gateway
from tests.support.python_ast import parse

ROOT = Path(settings.BASE_DIR)
PACKAGES = ("inventory", "controlplane", "tidemark_cli", "tidemark_client", "workers")
GATEWAY = "inventory/sql/gateway.py"

# modules that run SQL of their own, and why that is not Tidemark's database's business
OTHER_DATABASES = {
    "inventory/sources/remote_database.py": "opens a connection to a connector's own database",
    "inventory/sources/meta_table/__init__.py": "reads a meta table in a connector's own database",
    "inventory/sources/table/__init__.py": "reads a table connector's own database",
    "inventory/services/own_database.py": "asks a sink's or source's connection who it is",
    "inventory/management/commands/demo.py": "the demo creates its source and sink databases",
    "inventory/management/commands/_demo_history.py": "the demo creates and fills its source",
}
# workers.spark imports no Django and nothing of Tidemark outside itself (tests/test_module_layout):
# the executors write to the sinks, and fence.py asks the publish fence on a connection of its own
EXECUTORS = "workers/spark/"

SENDS = {"execute", "executemany", "callproc", "raw", "copy_expert", "copy_from"}


def sql_sends(source: str) -> list[str]:
    """What in `source` runs SQL: `<x>.execute(...)` and its kin, `<x>.raw(...)`, and a cursor of
    Django's connection (`connection.cursor()`, `connections[...].cursor()`)."""
    found = []
    for node in ast.walk(parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        if name in SENDS:
            found.append(f"{node.lineno}: .{name}()")
        elif name == "cursor" and (
            (isinstance(owner, ast.Name) and owner.id == "connection")
            or (
                isinstance(owner, ast.Subscript) and getattr(owner.value, "id", "") == "connections"
            )
        ):
            found.append(f"{node.lineno}: connection.cursor()")
    return found


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if "migrations" not in path.parts:
                yield relative, path


def test_no_module_but_the_gateway_sends_sql_to_tidemarks_database():
    senders = {
        relative: sends
        for relative, path in _modules()
        if relative != GATEWAY
        and relative not in OTHER_DATABASES
        and not relative.startswith(EXECUTORS)
        and (sends := sql_sends(path.read_text()))
    }
    assert senders == {}, "send it through a function of inventory/sql/gateway.py"


def test_the_modules_of_other_databases_use_no_cursor_of_tidemarks_connection():
    for relative in OTHER_DATABASES:
        text = (ROOT / relative).read_text()
        assert sql_sends(text), f"{relative} runs no SQL: take it off the list"
        cursors = [s for s in sql_sends(text) if s.endswith("connection.cursor()")]
        if "/management/commands/" not in relative:  # the demo's CREATE DATABASE on the server
            assert cursors == [], relative


@pytest.mark.parametrize(
    "source",
    [
        "from django.db import connection\n"
        "with connection.cursor() as c:\n    c.execute('SELECT 1')\n",
        "from inventory.models import Batch\nBatch.objects.raw('SELECT * FROM inventory_batch')\n",
        "from django.db import connections\nconnections['default'].cursor()\n",
    ],
)
def test_the_scan_finds_a_statement_sent_around_the_gateway(source):
    assert sql_sends(source)


def test_only_the_gateway_reads_the_named_statements():
    for relative, path in _modules():
        if relative not in (GATEWAY, "inventory/sql/__init__.py"):
            tree = parse(path.read_text())
            names = {
                node.func.id
                for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            }
            assert not names & {"query", "dashboard_query"}, relative


# ---- the SQLSTATE table ------------------------------------------------------------------------


class _Cause(Exception):
    def __init__(self, pgcode):
        self.pgcode = pgcode


def _refused(code: str, kind=DatabaseError, **context):
    exc = kind(f"refused {code}\nCONTEXT: PL/pgSQL function")
    exc.__cause__ = _Cause(code)
    with gateway._refusals(**context):
        raise exc


@pytest.mark.parametrize(
    "code, error", [("TM400", Conflict), ("TM404", NotFound), ("TM409", Conflict)]
)
def test_a_refusal_becomes_its_domain_error_with_the_first_line_of_the_message(code, error):
    with pytest.raises(error) as raised:
        _refused(code)
    assert str(raised.value) == f"refused {code}"


def test_a_source_refusal_names_the_sources_field_and_a_bad_weight_names_weight():
    for code in ("TM422", "42P01", "42703"):
        with pytest.raises(InvalidInput) as raised:
            _refused(code, source_field="config.meta_table")
        assert raised.value.field == "config.meta_table"
    with pytest.raises(InvalidInput) as raised:
        _refused("22023", kind=DataError, source_field="config.meta_table")
    assert raised.value.field == "weight"
    with pytest.raises(InvalidInput) as raised:  # any other bad value read from the source
        _refused("22P02", kind=DataError, source_field="config.meta_table")
    assert raised.value.field == "config.meta_table"


def test_a_code_outside_the_table_or_a_source_code_without_a_source_stays_a_database_error():
    with pytest.raises(DatabaseError):
        _refused("40001")
    for code in ("42P01", "TM422", "22023"):  # bugs, unless the call reads an item source
        with pytest.raises(DatabaseError):
            _refused(code)


@pytest.mark.django_db
def test_a_refused_move_leaves_the_callers_transaction_usable():
    from django.db import transaction

    with transaction.atomic():
        with pytest.raises(Conflict, match="may not move from new to succeeded"):
            gateway.batch_transition(ids=[0], from_statuses=["new"], to="succeeded")
        with connection.cursor() as cursor:  # InFailedSqlTransaction without the savepoint
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
