"""An expired lease is recovered within one reaper interval however many processes acquire.

The reaper used to skip a batch whose job row an acquirer held (its SKIP LOCKED covered the joined
job row), so processes acquiring in a loop could keep a lost worker's batch `running` for a minute.
Now acquire takes over its job's expired leases under the job lock it holds, and the reaper waits
for the job's row as acquirers do. Both are shown here with acquirers in separate OS processes.
"""

import multiprocessing
import time
import traceback
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.models.functions import Now

from inventory.models import Batch, BatchAttempt, BatchStatus, Job
from inventory.services import lifecycle
from inventory.services.errors import Conflict
from inventory.services.scheduling import FIXED_STEPS, REAPER
from tests.support.factories import make_assets, make_job

pytestmark = pytest.mark.django_db(transaction=True)

ACQUIRERS = 4
# one reaper interval (beat's period for the reaper); generous on a machine at load 10
REAPER_INTERVAL = FIXED_STEPS[REAPER][1]


def _acquire_in_a_loop(job_id, worker, stop, acquisitions, errors, hold):
    """Acquire (and commit what it gets) until told to stop. With `hold`, each acquire runs in a
    transaction that keeps the job's row for `hold` seconds first, as an acquire planning over a
    large source does: then the job's row is almost never free, which is what starved the old
    reaper (a paused job makes the acquire refuse, so it takes no lease over itself)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")
        job = Job.objects.get(pk=job_id)
        while not stop.is_set():
            try:
                with transaction.atomic():
                    if hold:
                        with connection.cursor() as cursor:
                            cursor.execute(
                                "SELECT pg_sleep(%s) FROM inventory_job WHERE id = %s FOR UPDATE",
                                [hold, job_id],
                            )
                    batch = lifecycle.batch_acquire(job=job, worker=worker)
            except Conflict:
                batch = None
            with acquisitions.get_lock():
                acquisitions.value += 1
            if batch is not None:
                lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt, result={})
    except BaseException:
        errors.put(traceback.format_exc())
        raise
    finally:
        connections.close_all()


class Acquirers:
    """ACQUIRERS forked processes acquiring on one job in a loop, each on its own connection."""

    def __init__(self, job_id, *, hold=0.0):
        connections.close_all()  # a forked child must never share the parent's socket
        context = multiprocessing.get_context("fork")
        self.stop = context.Event()
        self.acquisitions = context.Value("i", 0)
        self.errors = context.Queue()
        self.processes = [
            context.Process(
                target=_acquire_in_a_loop,
                args=(job_id, f"loop-{n}", self.stop, self.acquisitions, self.errors, hold),
            )
            for n in range(ACQUIRERS)
        ]

    def __enter__(self):
        for process in self.processes:
            process.start()
        # wait for the fact that they are hammering the job, not for a time
        deadline = time.monotonic() + 60
        while self.acquisitions.value < 5 * ACQUIRERS:
            assert time.monotonic() < deadline, "the acquirers never got going"
            assert all(p.is_alive() for p in self.processes), self._failures()
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()
        assert [p.exitcode for p in self.processes] == [0] * ACQUIRERS, self._failures()

    def _failures(self):
        failures = []
        while not self.errors.empty():
            failures.append(self.errors.get())
        return "\n".join(failures)


def _lost_batches(job, count):
    """`count` running batches of `job` whose worker is gone: their leases expired a second ago."""
    lost = [lifecycle.batch_acquire(job=job, worker="lost") for _ in range(count)]
    Batch.objects.filter(pk__in=[b.id for b in lost]).update(
        lease_expires_at=Now() - timedelta(seconds=1)
    )
    return [b.id for b in lost]


def _attempts(batch_id):
    return list(
        BatchAttempt.objects.filter(batch_id=batch_id)
        .order_by("number")
        .values_list("number", "outcome", "error__type")
    )


def test_acquirers_in_a_loop_take_over_an_expired_lease_without_the_reaper():
    job = make_job(max_items=1, retry_backoff_seconds=0, max_attempts=3)
    make_assets(job.connector, [1, 1])
    (lost,) = _lost_batches(job, 1)
    # the other item is committed: from now on the acquirers find nothing new to plan
    other = lifecycle.batch_acquire(job=job, worker="ok")
    lifecycle.batch_succeed(batch_id=other.id, attempt=other.attempt, result={})

    started = time.monotonic()
    with Acquirers(job.pk):
        deadline = started + REAPER_INTERVAL
        while Batch.objects.get(pk=lost).status != BatchStatus.SUCCEEDED:
            assert time.monotonic() < deadline, "the expired lease outlived one reaper interval"
            time.sleep(0.05)

    batch = Batch.objects.get(pk=lost)
    # attempt 1 failed as a lost worker's, attempt 2 was taken by a looping acquirer and committed
    assert (batch.status, batch.attempt) == (BatchStatus.SUCCEEDED, 2)
    assert batch.worker.startswith("loop-")
    assert _attempts(lost) == [(1, "failed", "LeaseExpired"), (2, "succeeded", None)]


def test_the_reaper_recovers_expired_leases_while_acquirers_hold_the_job_row():
    job = make_job(max_items=1, retry_backoff_seconds=60, max_attempts=3)
    make_assets(job.connector, [1, 1, 1])
    lost = _lost_batches(job, 3)
    # paused: every acquire takes the job's row lock, then refuses, and takes nothing over
    Job.objects.filter(pk=job.pk).update(paused=True)

    with Acquirers(job.pk, hold=0.05) as acquirers:
        started = time.monotonic()
        reaped = lifecycle.batches_reap_expired()  # one run of the reaper
        took = time.monotonic() - started
        # the acquirers were hammering the job before the run (Acquirers waits for that) and
        # still are after it: the reaper ran among them, not in a pause of theirs
        after = acquirers.acquisitions.value
        deadline = time.monotonic() + 60
        while acquirers.acquisitions.value <= after:
            assert time.monotonic() < deadline, "the acquirers stopped while the reaper ran"
            time.sleep(0.01)

    assert sorted(reaped) == lost
    assert took < REAPER_INTERVAL
    for batch in Batch.objects.filter(pk__in=lost):
        assert (batch.status, batch.attempt) == (BatchStatus.FAILED, 1)
        assert batch.error["type"] == "LeaseExpired" and "lost" in batch.error["message"]
        assert batch.lease_expires_at is None and batch.next_attempt_at > batch.finished_at
        assert _attempts(batch.id) == [(1, "failed", "LeaseExpired")]
