"""One owner per status transition: a batch's or a backfill's status is written only by the SQL
functions of inventory/sql/schema/transitions.sql (tidemark_batch_insert,
tidemark_batch_transition, tidemark_backfill_transition), which refuse a move that is not in the
move tables, and (for a backfill's birth) by backfills.backfill_create. The static scans fail when
a status is written anywhere else, in Python or in SQL."""

import ast
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from inventory.models import BackfillStatus, BatchStatus
from inventory.services import lifecycle
from inventory.services.errors import Conflict
from inventory.sql import SCHEMA_FILES, SQL_DIR
from tests.support.factories import make_job
from tests.support.python_ast import parse

ROOT = Path(settings.BASE_DIR)
PACKAGES = ("inventory", "workers", "controlplane")

# (module path, function) allowed to write a status in Python: a backfill's birth, whose row the
# ORM creates with its first status (every later move goes through tidemark_backfill_transition)
PYTHON_OWNERS = {("inventory/services/backfills.py", "backfill_create")}
SQL_OWNER = "transitions.sql"

ENTITY = re.compile(r"batch|backfill", re.IGNORECASE)
WRITE_CALLS = {"update", "create", "bulk_create", "get_or_create", "update_or_create"}


def _python_files():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _mentions_entity(node: ast.AST) -> bool:
    return bool(ENTITY.search(ast.unparse(node)))


def _status_writes(tree: ast.AST):
    """(line, function, what) for each write of a batch's or backfill's status in `tree`."""
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if isinstance(child, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and target.attr == "status"
                        and _mentions_entity(target.value)
                    ):
                        found.append((child.lineno, function, ast.unparse(target)))
            if isinstance(child, ast.Call):
                func = child.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                keywords = {k.arg: k.value for k in child.keywords if k.arg}
                receiver = func.value if isinstance(func, ast.Attribute) else func
                # Model.objects.update/create(status=...), Batch(status=...), bulk_create(...)
                if "status" in keywords and (
                    (called in WRITE_CALLS and _mentions_entity(receiver))
                    or called in ("Batch", "Backfill")
                    or re.search(r"(Batch|Backfill)Status\.", ast.unparse(keywords["status"]))
                    and called in WRITE_CALLS
                ):
                    found.append((child.lineno, function, ast.unparse(child)[:80]))
                if called == "bulk_create" and _mentions_entity(child):
                    found.append((child.lineno, function, ast.unparse(child)[:80]))
                # batch.save(update_fields=[..."status"...])
                fields = keywords.get("update_fields")
                if (
                    called == "save"
                    and fields is not None
                    and "'status'" in ast.unparse(fields)
                    and _mentions_entity(receiver)
                ):
                    found.append((child.lineno, function, ast.unparse(child)[:80]))
            visit(child, name)

    visit(tree, "")
    return found


def test_no_python_code_writes_a_status_outside_the_owner():
    strays = []
    for path in _python_files():
        relative = path.relative_to(ROOT).as_posix()
        for line, function, what in _status_writes(parse(path.read_text())):
            if (relative, function) not in PYTHON_OWNERS:
                strays.append(f"{relative}:{line} ({function}): {what}")
    assert strays == []


def test_the_python_scan_finds_what_it_looks_for():
    # each form the scan must catch, so that the test above cannot pass by finding nothing
    samples = [
        "batch.status = 'x'",
        "Batch.objects.filter(pk=1).update(status=BatchStatus.CANCELLED)",
        "backfill.save(update_fields=['status', 'updated_at'])",
        "Batch.objects.bulk_create(Batch(job=job) for p in plan)",
        "Backfill.objects.create(job=job, status=BackfillStatus.RUNNING)",
        "qs.update(status=BatchStatus.QUEUED)",
    ]
    for sample in samples:
        assert _status_writes(parse(sample)), sample
    assert _status_writes(parse("Batch.objects.filter(status=BatchStatus.RUNNING)")) == []
    assert _status_writes(parse("record.status = 'done'")) == []


# an INSERT into, or an UPDATE of, inventory_batch / inventory_backfill (not their attempt or
# throttle tables) whose column list or SET clause names status
SQL_STATEMENT = re.compile(
    r"\b(INSERT\s+INTO|UPDATE)\s+(inventory_batch|inventory_backfill)\b(?!attempt|throttle)"
    r"(?P<rest>.*?)(;|\bWHERE\b|\bRETURNING\b|\bSELECT\b|\bVALUES\b)",
    re.IGNORECASE | re.DOTALL,
)
STATUS_COLUMN = re.compile(r"(\(|,|\bSET)\s*status\b", re.IGNORECASE)


def _sql_status_writes(text: str) -> list[str]:
    text = re.sub(r"--[^\n]*", "", text)
    return [
        m.group(0)[:80]
        for m in SQL_STATEMENT.finditer(text)
        if STATUS_COLUMN.search(m.group(0)) or re.search(r"\bstatus\s*=", m.group("rest"))
    ]


def test_no_sql_writes_a_status_outside_the_owner():
    files = [SQL_DIR / "schema" / name for name in SCHEMA_FILES if name != SQL_OWNER]
    files.append(SQL_DIR / "queries.sql")
    strays = {path.name: _sql_status_writes(path.read_text()) for path in files}
    assert {name: found for name, found in strays.items() if found} == {}


def test_the_sql_scan_finds_what_it_looks_for():
    owner = (SQL_DIR / "schema" / SQL_OWNER).read_text()
    # the owner writes statuses (an UPDATE of each table, the INSERT of a batch)
    assert len(_sql_status_writes(owner)) >= 4
    assert _sql_status_writes("UPDATE inventory_batch SET error = '{}', status = 'dead' WHERE x")
    assert _sql_status_writes("INSERT INTO inventory_backfill (job_id, status) VALUES (1, 'x')")
    assert not _sql_status_writes("UPDATE inventory_batchattempt SET outcome = 'failed' WHERE x")
    assert not _sql_status_writes("UPDATE inventory_batch SET lease_expires_at = NULL WHERE x")


# ---- the database refuses a move that is not in the table --------------------------------------


@pytest.mark.django_db
def test_an_illegal_batch_move_is_refused():
    from inventory.models import Batch

    job = make_job()
    (batch,) = lifecycle.batches_insert(
        job=job, status=BatchStatus.QUEUED, planned=[(1, 2, 1, 1)], snapshot={}
    )
    (batch,) = lifecycle.batches_transition(
        [batch.pk],
        from_statuses=(BatchStatus.QUEUED,),
        to=BatchStatus.RUNNING,
        worker="w",
        lease_seconds=60,
    )
    assert (batch.status, batch.attempt, batch.worker) == (BatchStatus.RUNNING, 1, "w")
    # running -> succeeded is a move; succeeded -> running is not
    with pytest.raises(Conflict, match="may not move from succeeded to running"):
        lifecycle.batches_transition(
            [batch.pk], from_statuses=(BatchStatus.SUCCEEDED,), to=BatchStatus.RUNNING, worker="w"
        )
    with pytest.raises(Conflict, match="may not move from cancelled to queued"):
        lifecycle.batches_transition(
            [batch.pk], from_statuses=(BatchStatus.CANCELLED,), to=BatchStatus.QUEUED
        )
    assert Batch.objects.get(pk=batch.pk).status == BatchStatus.RUNNING
    # a legal move from another status than the batch's moves nothing
    assert (
        lifecycle.batches_transition(
            [batch.pk], from_statuses=(BatchStatus.QUEUED,), to=BatchStatus.CANCELLED
        )
        == []
    )
    (cancelled,) = lifecycle.batches_transition(
        [batch.pk], from_statuses=(BatchStatus.RUNNING,), to=BatchStatus.CANCELLED
    )
    assert cancelled.status == BatchStatus.CANCELLED and cancelled.lease_expires_at is None


@pytest.mark.django_db
def test_a_batch_is_not_born_in_a_status_it_cannot_start_in():
    job = make_job()
    with pytest.raises(DatabaseError, match="may not move from new to succeeded"):
        with transaction.atomic():
            lifecycle.batches_insert(
                job=job, status=BatchStatus.SUCCEEDED, planned=[(1, 2, 1, 1)], snapshot={}
            )


@pytest.mark.django_db
def test_an_illegal_backfill_move_is_refused():
    from inventory.models import Backfill

    job = make_job()
    backfill = Backfill.objects.create(
        job=job,
        range_start=1,
        range_end=2,
        batch_weight=1,
        max_items=1,
        status=BackfillStatus.COMPLETED,
    )
    with pytest.raises(DatabaseError, match="may not move from completed to running"):
        with transaction.atomic():
            lifecycle.backfills_transition(
                [backfill.pk], from_statuses=(BackfillStatus.COMPLETED,), to=BackfillStatus.RUNNING
            )
    assert Backfill.objects.get(pk=backfill.pk).status == BackfillStatus.COMPLETED


@pytest.mark.django_db
def test_every_move_in_the_tables_names_real_statuses():
    with connection.cursor() as cursor:
        cursor.execute("SELECT from_status, to_status FROM tidemark_batch_move")
        batch_moves = cursor.fetchall()
        cursor.execute("SELECT from_status, to_status FROM tidemark_backfill_move")
        backfill_moves = cursor.fetchall()
    assert {s for move in batch_moves for s in move} <= {"new", *BatchStatus.values}
    assert {s for move in backfill_moves for s in move} <= {"new", *BackfillStatus.values}
    # nothing leaves a final status but a replay's supersede
    assert {to for frm, to in batch_moves if frm in ("succeeded", "skipped")} == {"superseded"}
    assert not [m for m in batch_moves if m[0] in ("cancelled", "superseded")]
