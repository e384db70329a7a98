"""Dispatch: plan a job's work now and nudge Celery workers to take it.

Workers take work in one place only, the acquire path (`lifecycle.batch_acquire`, SQL
`tidemark_acquire`), as API clients do. A Celery message is a nudge, `tidemark.run_job` with a job
id ("job J may have work"): idempotent, and cheap to lose, since the database holds every batch's
state and beat's steps nudge again (a lost nudge costs at most one step's interval, never a batch
left waiting). The beat steps (retry requeue with its sweep, backfill pacing) and the operator's
"run now" end here. Tasks are sent by name (`send`), so nothing in inventory/ imports workers/:
the worker side (workers/tasks.py) calls execution.job_work for each nudge it receives.
"""

import logging
from dataclasses import dataclass

from celery import current_app
from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.db.models.functions import Coalesce

from inventory.models import (
    Backfill,
    BackfillStatus,
    Batch,
    BatchKind,
    BatchStatus,
    ConnectorState,
    Job,
)
from inventory.services import lifecycle
from inventory.sources.registry import source_for_connector
from inventory.sql import gateway

log = logging.getLogger(__name__)

RUN_JOB = "tidemark.run_job"
DISCOVER_ASSETS = "tidemark.discover_assets"

# Housekeeping before work. On the Redis broker a worker takes a queue's plain list first and then
# its priority lists in order (0 is the highest, messages without a priority go to the plain
# list). Batch work (nudges) and discovery go a step behind, so the reaper, retry requeue, pacing
# and orchestration never wait behind a backlog of nudges: at most behind the work a worker is
# busy with. (Redis only: RabbitMQ reads priorities the other way round.)
WORK_PRIORITY = 6
WORK_TASKS = frozenset({RUN_JOB, DISCOVER_ASSETS})


def dispatch(job_ids: list[int]) -> None:
    """Nudge the worker side once per entry of `job_ids` (a job may be named several times, one
    per batch it may start at once), after the current transaction commits."""
    if not job_ids:
        return
    ids = list(job_ids)
    transaction.on_commit(lambda: [nudge(job_id) for job_id in ids])


def nudge(job_id: int, *, countdown: float | None = None) -> None:
    """Tell the workers that job `job_id` may have work (now, or after `countdown` seconds)."""
    send(RUN_JOB, job_id, countdown=countdown)


def send(task, *args, countdown: float | None = None) -> None:
    """Enqueue a task by name ("tidemark.run_job"; a task object is accepted too) on the
    configured queue, read at send time (tests point the app at their own). A signature by name:
    the task object is used when this process has it registered, else the message goes by name."""
    name = task if isinstance(task, str) else task.name
    # the project's app (controlplane/celery.py, current once Django's settings are imported)
    app = current_app if isinstance(task, str) else task.app
    behind = {"priority": WORK_PRIORITY} if name in WORK_TASKS else {}
    app.signature(
        name, args=list(args), queue=app.conf.task_default_queue, countdown=countdown, **behind
    ).apply_async()


@dataclass
class RunOutcome:
    job: str
    planned: list[int]
    dispatched: list[int]
    reason: str = ""


def job_run(*, job: Job) -> RunOutcome:
    """Plan the job's new items now (up to `max_concurrency` batches in flight) and nudge the
    workers once per planned batch; they start them through acquire.

    Nothing new means no batch and no nudge: Spark is not touched. Batches already waiting are
    the sweep's (`batches_dispatch_due`). An urgent backfill (priority > 0) of the job holds new
    incremental planning back while it may start a batch; its batches are acquire's (nudged by
    pacing).
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
        in_flight = Batch.objects.filter(
            job=job,
            kind=BatchKind.INCREMENTAL,
            status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING],
        ).count()
        planned = []
        source = source_for_connector(job.connector)  # built once for every batch planned here
        for _ in range(max(job.max_concurrency - in_flight, 0)):
            batch = lifecycle.batch_plan_next(job=job, source=source)
            if batch is None:
                break
            planned.append(batch.pk)
        dispatch([job.pk] * len(planned))
    return RunOutcome(job=job.name, planned=planned, dispatched=planned)


def _urgent_backfill(job: Job) -> Backfill | None:
    """The urgent backfill (priority > 0) that may start a batch now, by the rule acquire claims
    by (`tidemark_backfill_admissible`: running, a due batch, room under its max_concurrency and
    the shared throttle); one at its limit holds nothing back, in acquire and here alike."""
    backfill_id = gateway.urgent_backfill_admissible(job_id=job.pk)
    return None if backfill_id is None else Backfill.objects.get(pk=backfill_id)


def batches_dispatch_due() -> list[int]:
    """Retries whose backoff has passed become queued, and every job with a due incremental
    batch and room for it under `max_concurrency` is nudged (a beat step, also the reaper's).

    The sweep is what makes a lost nudge harmless: whatever waits is nudged again here. Returns
    the requeued incremental batches of runnable jobs; backfill retries are pacing's to nudge.
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
        dispatch(jobs_waiting())
    return runnable


def jobs_waiting() -> list[int]:
    """Active jobs with a due incremental batch (queued, or a retry whose backoff is over) and
    fewer than `max_concurrency` incremental batches running."""
    running = (
        Batch.objects.filter(
            job=OuterRef("pk"), kind=BatchKind.INCREMENTAL, status=BatchStatus.RUNNING
        )
        .values("job")
        .annotate(n=Count("id"))
        .values("n")
    )
    due = Batch.objects.filter(
        lifecycle.batch_due(), job=OuterRef("pk"), kind=BatchKind.INCREMENTAL
    )
    return list(
        Job.objects.filter(Exists(due), paused=False, connector__state=ConnectorState.ACTIVE)
        .annotate(running=Coalesce(Subquery(running), 0))
        .filter(running__lt=F("max_concurrency"))
        .order_by("id")
        .values_list("id", flat=True)
    )


def backfills_pace() -> dict[int, list[int]]:
    """Nudge the jobs of running backfills once per batch the backfill may start now (a beat
    step); returns those batches by backfill.

    Which batches may start is SQL's one rule (tidemark_backfill_admissible: `max_concurrency`
    and the shared throttle), the rule acquire claims by. A backfill with priority above 0 goes
    ahead of the job's incremental work; one at or below 0 waits while a due incremental batch of
    the job does, as acquire hands that one out first.
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
                lifecycle.batch_due(), job_id=backfill.job_id, kind=BatchKind.INCREMENTAL
            ).exists()
        ):
            continue
        sent[backfill.pk] = backfill_pace(backfill=backfill)
    return {pk: ids for pk, ids in sent.items() if ids}


def backfill_pace(*, backfill: Backfill) -> list[int]:
    """The batches of `backfill` that may start now (in range order), with one nudge of its
    job for each; the workers then claim them through acquire."""
    with transaction.atomic():
        lifecycle.batches_requeue_due(backfill_id=backfill.pk)
        ids = gateway.backfill_admissible(backfill_id=backfill.pk)
        dispatch([backfill.job_id] * len(ids))
    return ids
