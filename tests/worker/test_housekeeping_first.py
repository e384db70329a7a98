"""Beat's housekeeping is never stuck behind a backlog of work in the broker, nor thrown away by
a worker whose clock is wrong.

Found by the large soak: two workers each busy with a batch for seconds, 140 messages queued,
and the reaper's messages behind them, so batches whose worker had died stayed `running` for
minutes past their lease (and 24 stale pacing steps waited there too). Now every nudge and
discovery goes a priority step behind, so a worker takes the queued reaper before any queued
nudge, and copies of a step that waited in the broker are skipped by the database's clock.

Found by the second large soak: the steps used to expire after their interval, and Celery reads
an expiry against the receiving worker's clock; workers whose clock had jumped an hour ahead
discarded every step, the reaper's too, and a batch stayed `running` 11 minutes past its lease.
So the worker here runs with its wall clock an hour ahead (libfaketime, as the soak's clock_jump).

Shown with a real worker on a queue of this test's own and the embedded Redis: the backlog and
the housekeeping messages are queued before the worker starts, then the test waits on facts (the
lost batch reaped) and reads the order in which the worker received its messages.
"""

import re
from datetime import datetime, timedelta

import pytest
from django.db.models.functions import Now
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import ModelEntry

from bench.soak_machine import faketime_env
from inventory.models import Batch, BatchStatus
from inventory.services import dispatch, lifecycle, scheduling
from tests.support.factories import make_assets, make_job
from tests.support.worker_fixtures import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 40  # nudges queued ahead of the reaper's message
COPIES = 3  # of the requeue step, as beat sends them while workers are busy
AHEAD = 3600  # the worker's wall clock, seconds ahead of the real time


def _send_as_beat(name: str) -> str:
    """Send beat's entry `name` with the options celery beat sends it with (django-celery-beat's
    model: priority, expires, headers), on this test's queue; returns the task id."""
    from controlplane.celery import app

    entry = ModelEntry(PeriodicTask.objects.get(name=name), app=app)
    result = app.send_task(
        entry.task, entry.args, entry.kwargs, queue=app.conf.task_default_queue, **entry.options
    )
    return result.id


def _received(log: str) -> list[str]:
    """Task names in the order the worker took their messages from the broker."""
    return re.findall(r"Task (tidemark\.\w+)\[[^\]]+\] received", log)


def _outcomes(log: str, ids: list[str]) -> list[str]:
    """What each task of `ids` returned, from the worker's "succeeded" lines."""
    return [
        found.group(1)
        for task_id in ids
        if (found := re.search(rf"\[{task_id}\] succeeded in [\d.]+s: (.*)", log))
    ]


def _clock_of(log: str) -> datetime:
    """The worker's wall clock when it became ready, from its log line's time stamp."""
    stamp = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+: \w+/MainProcess\] \S+ ready\.", log)
    assert stamp, log[-2000:]
    return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")


def test_the_reaper_is_taken_before_a_backlog_of_nudges_by_a_worker_whose_clock_is_ahead(
    worker_env, private_queue, worker_log_dir, tmp_path
):
    scheduling.schedules_sync()
    idle = make_job(name="idle")  # nothing to run: each nudge is an acquire that finds nothing
    # one attempt only: reaped, it is dead, so nothing sends the worker a batch to run
    lost_job = make_job(name="lost", max_items=1, max_attempts=1)
    make_assets(lost_job.connector, [1])
    lost = lifecycle.batch_acquire(job=lost_job, worker="gone")
    Batch.objects.filter(pk=lost.id).update(lease_expires_at=Now() - timedelta(seconds=1))

    for _ in range(BACKLOG):
        dispatch.nudge(idle.pk)
    # copies of the requeue step that waited behind busy workers, then the reaper's
    copies = [_send_as_beat(scheduling.REQUEUE) for _ in range(COPIES)]
    reaper = _send_as_beat(scheduling.REAPER)

    clock = faketime_env(tmp_path, "ahead")
    clock_file = clock["FAKETIME_TIMESTAMP_FILE"]
    with open(clock_file, "w") as f:
        f.write(f"+{AHEAD}\n")
    real_start = datetime.now()  # naive local time, as the log's stamps
    worker = WorkerProcess(
        env={**worker_env, **clock, "CELERY_QUEUE": private_queue},
        queue=private_queue,
        name="housekeeping",
        log_dir=worker_log_dir,
    )
    worker.start(wait_for_spark=False)
    try:
        wait_until(
            lambda: Batch.objects.get(pk=lost.id).status != BatchStatus.RUNNING,
            timeout=60,
            progress=worker.progress,
            message="the lost batch to be reaped",
        )
        wait_until(
            lambda: _received(worker.log()).count("tidemark.run_job") == BACKLOG,
            timeout=60,
            progress=worker.progress,
            message="the worker to take the whole backlog",
        )
        log = worker.log()
    finally:
        worker.stop()

    # the fault happened: the worker's clock was an hour ahead (its log's time stamps)
    ahead = (_clock_of(log) - real_start).total_seconds()
    assert AHEAD - 300 < ahead < AHEAD + 300, ahead
    order = _received(log)
    # the housekeeping messages came out first, though they were queued last
    assert order[: COPIES + 1] == ["tidemark.requeue_due"] * COPIES + ["tidemark.reap_leases"], (
        order[:6]
    )
    assert order.count("tidemark.run_job") == BACKLOG
    assert "Discarding" not in log  # nothing dropped by the worker's clock
    # the copies were skipped by the database's clock, one statement each: on a busy machine
    # more than half the step's interval may pass between two copies, so at least one
    ran = _outcomes(log, copies)
    assert len(ran) == COPIES, ran
    skipped = [outcome for outcome in ran if "skipped tidemark:requeue-due" in outcome]
    assert 1 <= len(skipped) < COPIES, ran
    assert "skipped" not in _outcomes(log, [reaper])[0]
    reaped = Batch.objects.get(pk=lost.id)
    assert reaped.status == BatchStatus.DEAD
    assert reaped.attempts.get(number=1).error["type"] == "LeaseExpired"
