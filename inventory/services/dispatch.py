"""Dispatch: plan a job's work now and hand it to Celery; keep backfills and retries moving.

The beat steps (scheduled runs, retry requeue, backfill pacing) and the operator's "run now" end
here. Tasks are sent by name (`send`), so nothing in inventory/ imports workers/: the worker side
(workers/tasks.py) calls execution.batch_execute for each batch it receives.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

from celery import current_app
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from inventory.models import (
    OPEN_STATUSES,
    Backfill,
    BackfillStatus,
    Batch,
    BatchKind,
    BatchStatus,
    ConnectorState,
    Job,
)
from inventory.services import lifecycle, throttle

log = logging.getLogger(__name__)

RUN_BATCH = "tidemark.run_batch"

# How long a queued batch may wait for a worker before a scheduled run sends its task again.
# Sending twice is harmless (only one start wins); never sending would leave it queued forever.
REDISPATCH_AFTER = timedelta(seconds=60)


def dispatch(batch_ids: list[int]) -> None:
    """Enqueue run_batch for each id once the current transaction commits (ids only)."""
    if not batch_ids:
        return
    ids = list(batch_ids)
    transaction.on_commit(lambda: [send(RUN_BATCH, batch_id) for batch_id in ids])


def send(task, *args, countdown: float | None = None) -> None:
    """Enqueue a task by name ("tidemark.run_batch"; a task object is accepted too) on the
    configured queue, read at send time (tests point the app at their own). A signature by name:
    the task object is used when this process has it registered, else the message goes by name."""
    name = task if isinstance(task, str) else task.name
    # the project's app (controlplane/celery.py, current once Django's settings are imported)
    app = current_app if isinstance(task, str) else task.app
    app.signature(
        name, args=list(args), queue=app.conf.task_default_queue, countdown=countdown
    ).apply_async()


@dataclass
class RunOutcome:
    job: str
    planned: list[int]
    dispatched: list[int]
    reason: str = ""


def job_run(*, job: Job) -> RunOutcome:
    """Plan the job's new items now (up to `max_concurrency` batches in flight) and enqueue them.

    Nothing new means no batch and no task: Spark is not touched. Queued incremental batches that
    have waited longer than REDISPATCH_AFTER (their task was lost, or the job was paused) are sent
    again. An urgent backfill (priority > 0) of the job holds incremental work back until it ends.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("connector").get(pk=job.pk)
        blocked = lifecycle.job_blocked_reason(job)
        if blocked:
            return RunOutcome(job=job.name, planned=[], dispatched=[], reason=blocked)
        urgent = _urgent_backfill(job)
        if urgent is not None:
            return RunOutcome(
                job=job.name,
                planned=[],
                dispatched=[],
                reason=f"backfill {urgent.pk} (priority {urgent.priority}) runs first",
            )
        requeued = lifecycle.batches_requeue_due(job_id=job.pk)
        incremental = Batch.objects.filter(job=job, kind=BatchKind.INCREMENTAL)
        in_flight = incremental.filter(status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING]).count()
        stale = list(
            incremental.filter(lifecycle.batch_due(), status=BatchStatus.QUEUED)
            .filter(
                Q(pk__in=requeued)
                | Q(created_at__lt=Now() - REDISPATCH_AFTER)
                | Q(finished_at__lt=Now() - REDISPATCH_AFTER)
            )
            .order_by("span")
            .values_list("id", flat=True)
        )
        planned = []
        for _ in range(max(job.max_concurrency - in_flight, 0)):
            batch = lifecycle.batch_plan_next(job=job)
            if batch is None:
                break
            planned.append(batch.pk)
        dispatch(stale + planned)
    return RunOutcome(job=job.name, planned=planned, dispatched=stale + planned)


def _urgent_backfill(job: Job) -> Backfill | None:
    return (
        Backfill.objects.filter(job=job, status=BackfillStatus.RUNNING, priority__gt=0)
        .filter(batches__status__in=OPEN_STATUSES)
        .order_by("-priority", "id")
        .first()
    )


def batches_dispatch_due() -> list[int]:
    """Retries whose backoff has passed: failed -> queued, and their tasks sent (a beat step).

    Incremental retries of paused jobs wait; backfill retries are left to the pacing step.
    """
    with transaction.atomic():
        ids = lifecycle.batches_requeue_due()
        runnable = list(
            Batch.objects.filter(
                pk__in=ids,
                kind=BatchKind.INCREMENTAL,
                job__paused=False,
                job__connector__state=ConnectorState.ACTIVE,
            ).values_list("id", flat=True)
        )
        dispatch(runnable)
    return runnable


def backfills_pace() -> dict[int, list[int]]:
    """Keep at most `max_concurrency` batches of each running backfill in flight (a beat step).

    A backfill with priority above 0 goes ahead of the job's incremental work; one at or below 0
    waits while the job has incremental batches queued or running. Sends are bounded by the free
    slots; `batch_execute` re-checks the limit under the backfill's row lock when a batch starts.
    """
    sent = {}
    running = Backfill.objects.filter(status=BackfillStatus.RUNNING).select_related(
        "job", "job__connector"
    )
    for backfill in running.order_by("-priority", "id"):
        if lifecycle.job_blocked_reason(backfill.job):
            continue
        if backfill.priority <= 0 and (
            Batch.objects.filter(
                job_id=backfill.job_id,
                kind=BatchKind.INCREMENTAL,
                status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING],
            ).exists()
        ):
            continue
        sent[backfill.pk] = backfill_pace(backfill=backfill)
    return {pk: ids for pk, ids in sent.items() if ids}


def backfill_pace(*, backfill: Backfill) -> list[int]:
    with transaction.atomic():
        backfill = Backfill.objects.select_for_update().get(pk=backfill.pk)
        if backfill.status != BackfillStatus.RUNNING:
            return []
        lifecycle.batches_requeue_due(backfill_id=backfill.pk)
        in_flight = backfill.batches.filter(status=BatchStatus.RUNNING).count()
        free = backfill.max_concurrency - in_flight
        if free <= 0:
            return []
        candidates = list(
            backfill.batches.filter(lifecycle.batch_due(), status=BatchStatus.QUEUED)
            .order_by("span")
            .values_list("id", "weight")[:free]
        )
        # the shared weight-per-minute budget of all backfills (services/throttle.py)
        ids = throttle.throttle_admit(backfill=backfill, candidates=candidates)
        dispatch(ids)
    return ids
