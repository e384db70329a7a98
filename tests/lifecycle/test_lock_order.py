"""One lock order (job -> watermark -> backfill -> batch) on every path: races that deadlocked, or let
a backfill exceed its max_concurrency, replayed with real concurrent connections.

Each race is made deterministic by a test-only trigger: a session that sets `tidemark.test_pause`
stops in its first UPDATE of a batch row (holding whatever it locked before) until the test opens
a gate (an advisory lock). The other session then runs into the first one's locks; the gate opens;
both must finish without "deadlock detected", and the end state must hold the invariants.
"""

import threading

import psycopg2
import pytest
from django.db import DatabaseError, connection

from inventory.models import Backfill, BackfillStatus, Batch, BatchStatus
from inventory.services import backfills, lifecycle
from inventory.services.errors import Conflict
from tests.support.factories import make_assets, make_job
from workers import execution

pytestmark = pytest.mark.django_db(transaction=True)

GATE_KEY = 72_409_001


@pytest.fixture
def pause_trigger():
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE OR REPLACE FUNCTION tidemark_test_pause() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                IF current_setting('tidemark.test_pause', true) = 'on' THEN
                    PERFORM pg_advisory_xact_lock_shared({GATE_KEY});
                END IF;
                RETURN NEW;
            END
            $$;
            CREATE TRIGGER tidemark_test_pause BEFORE UPDATE ON inventory_batch
            FOR EACH ROW EXECUTE FUNCTION tidemark_test_pause();
            """
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER IF EXISTS tidemark_test_pause ON inventory_batch;"
            "DROP FUNCTION IF EXISTS tidemark_test_pause();"
        )


class Session(threading.Thread):
    """Runs `call` on a database connection of its own; `paused` sessions stop in the trigger."""

    def __init__(self, call, *, paused: bool = False):
        super().__init__(daemon=True)
        self.call, self.paused = call, paused
        self.pid = None
        self.result = self.error = None
        self.connected = threading.Event()

    def run(self):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
                if self.paused:
                    cursor.execute("SET tidemark.test_pause = 'on'")
            self.connected.set()
            self.result = self.call()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.connected.set()
            connection.close()


def _waiting_on_a_lock(session: Session) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [session.pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


def _until(predicate, timeout=20.0):
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {predicate}")
        time.sleep(0.05)


def race(first, second):
    """`first` runs until its first batch UPDATE and stops there; `second` runs until it finishes
    or waits for a lock; then `first` goes on. Returns both sessions, finished."""
    gate = psycopg2.connect(**connection.get_connection_params())
    gate.autocommit = True
    try:
        with gate.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [GATE_KEY])
        a = Session(first, paused=True)
        a.start()
        a.connected.wait(10)
        _until(lambda: not a.is_alive() or _waiting_on_a_lock(a))
        assert a.is_alive(), f"the first session never reached its batch update: {a.error!r}"
        b = Session(second)
        b.start()
        b.connected.wait(10)
        _until(lambda: not b.is_alive() or _waiting_on_a_lock(b))
        with gate.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [GATE_KEY])
    finally:
        gate.close()
    a.join(30)
    b.join(30)
    assert not a.is_alive() and not b.is_alive(), "a session is still blocked"
    for session in (a, b):
        if isinstance(session.error, DatabaseError):
            pytest.fail(f"{session.error.__class__.__name__}: {session.error}")
    return a, b


def _backfill(*, batches_count: int, max_concurrency: int = 1, priority: int = 0) -> Backfill:
    job = make_job(batch_weight=10, max_items=1)
    assets = make_assets(job.connector, [10] * batches_count)
    return backfills.backfill_create(
        job=job,
        range_start=assets[0].pk,
        range_end=assets[-1].pk,
        max_concurrency=max_concurrency,
        priority=priority,
    )


def test_cancelling_a_batch_while_its_backfill_is_cancelled_does_not_deadlock(pause_trigger):
    backfill = _backfill(batches_count=1)
    (batch,) = backfill.batches.all()

    a, b = race(
        lambda: lifecycle.batch_cancel(batch_id=batch.pk, actor="op-a"),
        lambda: backfills.backfill_set_status(backfill=backfill, status=BackfillStatus.CANCELLED),
    )

    assert a.error is None
    # the batch cancel closed the backfill's last batch, so the backfill completed first
    assert b.error is None or isinstance(b.error, Conflict)
    assert Batch.objects.get(pk=batch.pk).status == BatchStatus.CANCELLED
    assert Backfill.objects.get(pk=backfill.pk).status in (
        BackfillStatus.COMPLETED,
        BackfillStatus.CANCELLED,
    )


def test_cancelling_a_batch_while_a_worker_starts_it_does_not_deadlock(pause_trigger):
    backfill = _backfill(batches_count=1)
    (batch,) = backfill.batches.all()

    a, b = race(
        lambda: lifecycle.batch_cancel(batch_id=batch.pk, actor="op-a"),
        lambda: execution._start_if_ours(batch_id=batch.pk, worker="w:1"),
    )

    assert a.error is None and b.error is None
    assert b.result.status == "ignored"  # the cancel won: the worker leaves the batch alone
    assert Batch.objects.get(pk=batch.pk).status == BatchStatus.CANCELLED


def test_a_commit_racing_a_redelivered_task_of_the_same_batch_does_not_deadlock(pause_trigger):
    backfill = _backfill(batches_count=1)
    (batch,) = backfill.batches.all()
    started = lifecycle.batch_start(batch_id=batch.pk, worker="w:1")

    a, b = race(
        lambda: lifecycle.batch_succeed(batch_id=batch.pk, attempt=started.attempt, result={}),
        lambda: execution._start_if_ours(batch_id=batch.pk, worker="w:2"),
    )

    assert a.error is None and b.error is None
    assert b.result.status == "ignored"
    batch.refresh_from_db()
    assert (batch.status, batch.attempt) == (BatchStatus.SUCCEEDED, 1)
    assert Backfill.objects.get(pk=backfill.pk).status == BackfillStatus.COMPLETED


def test_acquire_then_a_worker_start_never_exceed_a_backfills_max_concurrency(pause_trigger):
    backfill = _backfill(batches_count=2, max_concurrency=1, priority=1)
    waiting = list(backfill.batches.order_by("span").values_list("id", flat=True))

    a, b = race(
        lambda: lifecycle.batch_acquire(job=backfill.job, worker="acquirer:1"),
        lambda: execution._start_if_ours(batch_id=waiting[1], worker="w:1"),
    )

    assert a.error is None and b.error is None
    assert a.result.pk == waiting[0]
    assert b.result.status == "ignored" and "capacity" in b.result.detail
    assert backfill.batches.filter(status=BatchStatus.RUNNING).count() == 1


def test_a_worker_start_then_acquire_never_exceed_a_backfills_max_concurrency(pause_trigger):
    backfill = _backfill(batches_count=2, max_concurrency=1, priority=1)
    waiting = list(backfill.batches.order_by("span").values_list("id", flat=True))

    a, b = race(
        lambda: execution._start_if_ours(batch_id=waiting[1], worker="w:1"),
        lambda: lifecycle.batch_acquire(job=backfill.job, worker="acquirer:1"),
    )

    assert a.error is None and b.error is None
    assert a.result.pk == waiting[1]
    # no slot left in the backfill: acquire falls through to incremental work
    assert b.result is None or b.result.backfill_id is None
    assert backfill.batches.filter(status=BatchStatus.RUNNING).count() == 1
