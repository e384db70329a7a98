"""A batch is born or starts: planning the next incremental batch, acquire, a named start, the
heartbeat that keeps a started attempt's lease."""

from django.db import transaction
from django.db.models.functions import Now

from inventory.models import Backfill, BackfillStatus, Batch, BatchStatus, Job
from inventory.services.errors import Conflict, InvalidInput, NotFound, StaleAttempt
from inventory.services.lifecycle.shared import (
    MAX_BATCHES_PER_CALL,
    batch_due,
    batches_transition,
    config_snapshot,
    fence,
    job_blocked_reason,
)
from inventory.services.urls import refuse_control_characters
from inventory.sources.base import ItemSource
from inventory.sources.registry import source_for_connector
from inventory.sql import gateway


def batch_plan_next(*, job: Job, source: ItemSource | None = None) -> Batch | None:
    """Plan the next incremental batch of `job` and queue it, or None if no new item is waiting.

    The planner is SQL's, the only one (tidemark_plan_next; acquire plans with it too). `source`:
    the job's item source when the caller has built it already. Runs in the caller's transaction,
    which must hold the job's row lock.
    """
    source = source or source_for_connector(job.connector)
    # a bad weight or a source that no longer matches its config (the meta table or a column
    # changed) or refuses to be read (a job_output's expired commit) is InvalidInput
    return gateway.batch_plan_next(
        job_id=job.pk,
        items=source.planning_query(),
        snapshot=config_snapshot(job),
        source_field=source.config_field,
    )


@transaction.atomic
def batches_plan(*, job: Job, limit: int) -> list[Batch]:
    """Plan up to `limit` new incremental batches (a scheduled run), under the job's row lock."""
    job = Job.objects.select_for_update(of=("self",)).select_related("connector").get(pk=job.pk)
    if job_blocked_reason(job):
        return []
    source = source_for_connector(job.connector)
    planned = []
    for _ in range(limit):
        batch = batch_plan_next(job=job, source=source)
        if batch is None:
            break
        planned.append(batch)
    return planned


def batch_acquire(
    *,
    job: Job,
    worker: str,
    lease_seconds: int | None = None,
    limit: int | None = None,
    source: ItemSource | None = None,
) -> Batch | None:
    """Take the next batch of `job` and start it, or None when there is no work.

    In order: a waiting batch of an urgent backfill (priority > 0), a due retry or queued
    incremental batch, a newly planned incremental batch, a waiting batch of another backfill;
    no backfill ever has more than its `max_concurrency` batches running (counted under the
    backfill's row lock, as the worker start counts them), nor starts one the shared throttle
    refuses. With `limit` (a Celery worker passes the job's `max_concurrency`) no incremental
    batch starts while `limit` of them run; API clients set none. All of it is one call to
    tidemark_acquire (inventory/sql/schema/acquire.sql) under the job's row lock: every worker
    and API client takes work there, and outside an atomic block that one call is the whole
    transaction. `source`: the job's item source when the caller has built it already.
    """
    return gateway.batch_acquire(**_acquire_call(job, worker, lease_seconds, limit, source))


def _acquire_call(
    job: Job, worker: str, lease_seconds: int | None, limit: int | None, source: ItemSource | None
) -> dict:
    """The arguments of an acquire's SQL call, one batch or several."""
    if not worker:
        raise InvalidInput("worker", "name the worker taking the batch")
    # a worker's name is stored and shown on pages, in the admin and in metrics' labels
    refuse_control_characters(worker, field="worker")
    source = source or source_for_connector(job.connector)
    return {
        "job_id": job.pk,
        "items": source.planning_query(),
        "worker": worker,
        "lease_seconds": lease_seconds or job.lease_seconds,
        "snapshot": config_snapshot(job),
        "limit": limit,
        "source_field": source.config_field,
    }


def batches_acquire(
    *,
    job: Job,
    worker: str,
    count: int,
    lease_seconds: int | None = None,
    limit: int | None = None,
    source: ItemSource | None = None,
) -> list[Batch]:
    """Take up to `count` batches of `job` and start them for `worker`, in one call and one
    transaction: each is the batch `batch_acquire` would have started next, by the same rules
    (tidemark_acquire_batches calls tidemark_acquire again under the job's row lock). Fewer when
    the work runs out or a limit is reached; empty when there is none."""
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not (1 <= count <= MAX_BATCHES_PER_CALL)
    ):
        raise InvalidInput("count", f"must be an integer from 1 to {MAX_BATCHES_PER_CALL}")
    return gateway.batches_acquire(
        **_acquire_call(job, worker, lease_seconds, limit, source), count=count
    )


def batch_lock_for_start(batch_id: int) -> Batch | None:
    """Lock what starting `batch_id` needs, in the lock order (docs/architecture.md): the job's
    row shared (a pause waits for a start in progress, and a start after the pause sees it), the
    backfill's row (its running batches are counted under it, as tidemark_acquire counts them),
    then the batch's. Runs in the caller's transaction; None when the batch does not exist. The
    batch comes annotated with `is_due` and `db_now` (the database's clock)."""
    ref = Batch.objects.filter(pk=batch_id).values_list("job_id", "backfill_id").first()
    if ref is None:
        return None
    job_id, backfill_id = ref
    gateway.job_lock_for_start(job_id=job_id)
    if backfill_id is not None:
        Backfill.objects.select_for_update().filter(pk=backfill_id).first()
    return (
        Batch.objects.select_for_update(of=("self",))
        .select_related("job", "job__connector", "backfill")
        .annotate(is_due=batch_due(), db_now=Now())
        .filter(pk=batch_id)
        .first()
    )


def backfill_start_blocked(batch: Batch) -> str | None:
    """Why `batch`'s backfill lets no batch start now (not running, or at max_concurrency), or
    None. The caller holds the backfill's row lock (batch_lock_for_start)."""
    if batch.backfill_id is None:
        return None
    backfill = Backfill.objects.get(pk=batch.backfill_id)
    if backfill.status != BackfillStatus.RUNNING:
        return f"backfill is {backfill.status}"
    running = Batch.objects.filter(backfill_id=backfill.pk, status=BatchStatus.RUNNING).count()
    if running >= backfill.max_concurrency:
        return "backfill is at capacity"
    return None


def batch_start_locked(
    batch_id: int,
    *,
    worker: str,
    lease_seconds: int,
    from_statuses=(BatchStatus.QUEUED, BatchStatus.FAILED),
) -> Batch | None:
    """A waiting batch, locked by the caller, starts its next attempt (None: it was not waiting)."""
    started = batches_transition(
        [batch_id],
        from_statuses=from_statuses,
        to=BatchStatus.RUNNING,
        worker=worker,
        lease_seconds=lease_seconds,
    )
    return started[0] if started else None


@transaction.atomic
def batch_start(*, batch_id: int, worker: str, lease_seconds: int | None = None) -> Batch:
    """queued -> running for a worker that was handed this batch (the Celery path)."""
    batch = batch_lock_for_start(batch_id)
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    if batch.status != BatchStatus.QUEUED:
        raise Conflict(f"batch {batch_id} is {batch.status}, not queued")
    blocked = backfill_start_blocked(batch)
    if blocked:
        raise Conflict(f"batch {batch_id}: {blocked}")
    return batch_start_locked(
        batch_id,
        worker=worker,
        lease_seconds=lease_seconds or batch.job.lease_seconds,
        from_statuses=(BatchStatus.QUEUED,),
    )


def batch_heartbeat(*, batch_id: int, attempt: int, lease_seconds: int | None = None):
    """Extend the lease of a running attempt and return its new expiry; StaleAttempt if lost."""
    expires = gateway.batch_heartbeat(
        batch_id=batch_id, attempt=attempt, lease_seconds=lease_seconds
    )
    if expires is None:
        batch = Batch.objects.annotate(db_now=Now()).filter(pk=batch_id).first()
        if batch is None:
            raise NotFound(f"batch {batch_id} does not exist")
        # why, in the words a report from that attempt would get (not running, another attempt,
        # the lease expired at ...); the batch may have moved on since the refusal, so the last
        # word is the refusal itself
        fence(batch, attempt, require_lease=True)
        raise StaleAttempt(f"batch {batch_id} attempt {attempt} no longer holds the lease")
    return expires
