"""Beat's housekeeping is never stuck behind a backlog of work in the broker.

Found by the large soak: two workers each busy with a batch for seconds, 140 messages queued,
and the reaper's messages behind them, so batches whose worker had died stayed `running` for
minutes past their lease (and 24 stale pacing steps waited there too). Now every nudge and
discovery goes a priority step behind, so a worker takes the queued reaper before any queued
nudge, and a housekeeping step not taken within its interval is dropped (the next one is due).

Shown with a real worker on a queue of this test's own and the embedded Redis: the backlog and
the reaper's message are queued before the worker starts, then the test waits on facts (the
lost batch reaped) and reads the order in which the worker received its messages.
"""

import re
from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import ModelEntry

from inventory.models import Batch, BatchStatus
from inventory.services import dispatch, scheduling
from inventory.services import lifecycle as batches
from tests.factories import make_assets, make_job
from tests.worker_fixtures import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 40  # nudges queued ahead of the reaper's message


def _send_as_beat(name: str, **override) -> str:
    """Send beat's entry `name` with the options celery beat sends it with (django-celery-beat's
    model: priority, expires, headers), on this test's queue; returns the task id."""
    from controlplane.celery import app

    entry = ModelEntry(PeriodicTask.objects.get(name=name), app=app)
    options = {**entry.options, **override}
    result = app.send_task(
        entry.task, entry.args, entry.kwargs, queue=app.conf.task_default_queue, **options
    )
    return result.id


def _received(log: str) -> list[str]:
    """Task names in the order the worker took their messages from the broker."""
    return re.findall(r"Task (tidemark\.\w+)\[[^\]]+\] received", log)


def test_the_reaper_is_taken_before_a_backlog_of_nudges_and_stale_steps_are_dropped(
    worker_env, private_queue, worker_log_dir
):
    scheduling.schedules_sync()
    idle = make_job(name="idle")  # nothing to run: each nudge is an acquire that finds nothing
    # one attempt only: reaped, it is dead, so nothing sends the worker a batch to run
    lost_job = make_job(name="lost", max_items=1, max_attempts=1)
    make_assets(lost_job.connector, [1])
    lost = batches.batch_acquire(job=lost_job, worker="gone")
    Batch.objects.filter(pk=lost.id).update(lease_expires_at=Now() - timedelta(seconds=1))

    for _ in range(BACKLOG):
        dispatch.nudge(idle.pk)
    # a requeue step that waited past its interval behind busy workers, then the reaper's
    stale = _send_as_beat("tidemark:requeue-due", expires=timezone.now() - timedelta(seconds=1))
    _send_as_beat(scheduling.REAPER)

    worker = WorkerProcess(
        env={**worker_env, "CELERY_QUEUE": private_queue},
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

    order = _received(log)
    # the housekeeping messages came out first, though they were queued last
    assert order[:2] == ["tidemark.requeue_due", "tidemark.reap_leases"], order[:5]
    assert order.count("tidemark.run_job") == BACKLOG
    assert f"Discarding revoked task: tidemark.requeue_due[{stale}]" in log
    reaped = Batch.objects.get(pk=lost.id)
    assert reaped.status == BatchStatus.DEAD
    assert reaped.attempts.get(number=1).error["type"] == "LeaseExpired"
