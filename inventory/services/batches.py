"""The batch lifecycle: acquire, start, heartbeat, succeed, fail, reap, retry, cancel, skip.

queued -> running -> succeeded; running -> failed -> queued (backoff) until max_attempts, then dead;
queued|running|failed -> cancelled; dead -> skipped (with a reason). `attempt` is the fencing token:
only the holder of the current attempt, with a live lease, may commit (invariant 8).
"""

from datetime import timedelta

from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from inventory.models import (
    Backfill,
    BackfillStatus,
    Batch,
    BatchAttempt,
    BatchKind,
    BatchStatus,
    ConnectorState,
    Job,
)
from inventory.services import watermarks
from inventory.services.errors import Conflict, InvalidInput, NotFound, StaleAttempt
from inventory.services.items import source_for_connector
from inventory.services.planning import incremental_start, plan_step


def config_snapshot(job: Job) -> dict:
    return {
        "processor": job.processor,
        "params": job.params,
        "sink": job.sink,
        "batch_weight": job.batch_weight,
        "max_items": job.max_items,
        "watermark_type": job.watermark_type,
        "executor": job.executor,
    }


def job_is_runnable(job: Job) -> str | None:
    """Why the job may not take new work now, or None when it may."""
    if job.paused:
        return f"job {job.name} is paused"
    if job.connector.state != ConnectorState.ACTIVE:
        return f"connector {job.connector.name} is {job.connector.state}"
    return None


def batch_plan_next(*, job: Job) -> Batch | None:
    """Plan the next incremental batch of `job` as `queued`, or None if no new item is waiting.

    Runs in the caller's transaction, which must hold the job's row lock.
    """
    position = watermarks.Watermark.objects.values_list("position", flat=True).get(job_id=job.pk)
    lower, upper = incremental_start(job_id=job.pk, position=position)
    planned = plan_step(
        source=source_for_connector(job.connector),
        lower=lower,
        upper=upper,
        budget=job.batch_weight,
        max_items=job.max_items,
    )
    if planned is None:
        return None
    return Batch.objects.create(
        job=job,
        kind=BatchKind.INCREMENTAL,
        status=BatchStatus.QUEUED,
        span=(planned.lower, planned.upper),
        item_count=planned.item_count,
        weight=planned.weight,
        max_attempts=job.max_attempts,
        config_snapshot=config_snapshot(job),
    )


@transaction.atomic
def batches_plan(*, job: Job, limit: int) -> list[Batch]:
    """Plan up to `limit` new incremental batches (a scheduled run), under the job's row lock."""
    job = Job.objects.select_for_update().select_related("connector").get(pk=job.pk)
    if job_is_runnable(job):
        return []
    planned = []
    for _ in range(limit):
        batch = batch_plan_next(job=job)
        if batch is None:
            break
        planned.append(batch)
    return planned


@transaction.atomic
def batch_acquire(*, job: Job, worker: str, lease_seconds: int | None = None) -> Batch | None:
    """Take the next batch of `job` and start it: a due retry or queued batch, else a new plan.

    Backfill batches with a priority above 0 come before incremental work, the others after it,
    and a backfill never has more than its `max_concurrency` batches running.
    """
    job = Job.objects.select_for_update().select_related("connector").get(pk=job.pk)
    blocked = job_is_runnable(job)
    if blocked:
        raise Conflict(blocked)
    batches_requeue_due(job_id=job.pk)
    batch = (
        _claim_backfill(job, urgent=True)
        or _claim_queued(job)
        or batch_plan_next(job=job)
        or _claim_backfill(job, urgent=False)
    )
    if batch is None:
        return None
    return _start(batch, worker=worker, lease_seconds=lease_seconds or job.lease_seconds)


def _claim_queued(job: Job) -> Batch | None:
    return (
        Batch.objects.select_for_update(skip_locked=True)
        .filter(job=job, kind=BatchKind.INCREMENTAL, status=BatchStatus.QUEUED)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=timezone.now()))
        .order_by("span")
        .first()
    )


def _claim_backfill(job: Job, *, urgent: bool) -> Batch | None:
    backfills = (
        Backfill.objects.filter(
            job=job, status=BackfillStatus.RUNNING, priority__gt=0 if urgent else -32768
        )
        .annotate(in_flight=Count("batches", filter=Q(batches__status=BatchStatus.RUNNING)))
        .filter(in_flight__lt=F("max_concurrency"))
        .order_by("-priority", "id")
    )
    if not urgent:
        backfills = backfills.filter(priority__lte=0)
    for backfill in backfills:
        batch = (
            Batch.objects.select_for_update(skip_locked=True)
            .filter(backfill=backfill, status=BatchStatus.QUEUED)
            .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=timezone.now()))
            .order_by("span")
            .first()
        )
        if batch is not None:
            return batch
    return None


def _start(batch: Batch, *, worker: str, lease_seconds: int) -> Batch:
    now = timezone.now()
    batch.status = BatchStatus.RUNNING
    batch.attempt += 1
    batch.worker = worker
    batch.lease_expires_at = now + timedelta(seconds=lease_seconds)
    batch.started_at = now
    batch.finished_at = None
    batch.next_attempt_at = None
    batch.save(
        update_fields=[
            "status",
            "attempt",
            "worker",
            "lease_expires_at",
            "started_at",
            "finished_at",
            "next_attempt_at",
        ]
    )
    BatchAttempt.objects.create(batch=batch, number=batch.attempt, worker=worker, started_at=now)
    return batch


@transaction.atomic
def batch_start(*, batch_id: int, worker: str, lease_seconds: int | None = None) -> Batch:
    """queued -> running for a worker that was handed this batch (the Celery path)."""
    batch = _locked(batch_id)
    if batch.status != BatchStatus.QUEUED:
        raise Conflict(f"batch {batch_id} is {batch.status}, not queued")
    return _start(batch, worker=worker, lease_seconds=lease_seconds or batch.job.lease_seconds)


def batch_heartbeat(*, batch_id: int, attempt: int, lease_seconds: int | None = None):
    """Extend the lease of a running attempt; StaleAttempt if the lease was lost."""
    batch = Batch.objects.select_related("job").filter(pk=batch_id).first()
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    now = timezone.now()
    expires = now + timedelta(seconds=lease_seconds or batch.job.lease_seconds)
    updated = Batch.objects.filter(
        pk=batch_id, status=BatchStatus.RUNNING, attempt=attempt, lease_expires_at__gt=now
    ).update(lease_expires_at=expires)
    if not updated:
        raise StaleAttempt(f"batch {batch_id} attempt {attempt} no longer holds the lease")
    return expires


@transaction.atomic
def batch_succeed(
    *, batch_id: int, attempt: int, result: dict | None = None, watermark_value=None
) -> Batch:
    """Commit a batch whose output is durably written: the status and the watermark move together.

    The watermark row is locked first (lock order job -> watermark -> batch), then the batch is
    fenced: it must be running, on this attempt, with its lease not expired.
    """
    job_id = Batch.objects.values_list("job_id", flat=True).filter(pk=batch_id).first()
    if job_id is None:
        raise NotFound(f"batch {batch_id} does not exist")
    watermark = watermarks._lock_watermark(job_id)
    batch = _locked(batch_id)
    _fence(batch, attempt, require_lease=True)
    if watermark_value is not None:
        watermark_value = watermarks.parse_value(
            watermark.type, watermark_value, field="watermark_value"
        )
    now = timezone.now()
    batch.status = BatchStatus.SUCCEEDED
    batch.result = result or {}
    batch.watermark_value = watermark_value
    batch.finished_at = now
    batch.lease_expires_at = None
    batch.error = {}
    batch.save(
        update_fields=[
            "status",
            "result",
            "watermark_value",
            "finished_at",
            "lease_expires_at",
            "error",
        ]
    )
    _close_attempt(batch, outcome=BatchStatus.SUCCEEDED, now=now)
    if batch.kind == BatchKind.INCREMENTAL:
        watermarks.watermark_advance(watermark=watermark, trigger=batch)
    elif batch.backfill_id:
        _complete_backfill_if_done(batch.backfill_id)
    return batch


@transaction.atomic
def batch_fail(*, batch_id: int, attempt: int, error: dict) -> Batch:
    """Record a failed attempt: back to the queue after a backoff, or dead when attempts run out."""
    batch = _locked(batch_id)
    _fence(batch, attempt, require_lease=False)
    return _fail(batch, error=error)


def _fail(batch: Batch, *, error: dict) -> Batch:
    now = timezone.now()
    batch.error = error
    batch.finished_at = now
    batch.lease_expires_at = None
    if batch.attempt >= batch.max_attempts:
        batch.status = BatchStatus.DEAD
        batch.next_attempt_at = None
    else:
        backoff = batch.job.retry_backoff_seconds * 2 ** (batch.attempt - 1)
        batch.status = BatchStatus.FAILED
        batch.next_attempt_at = now + timedelta(seconds=backoff)
    batch.save(
        update_fields=["status", "error", "finished_at", "lease_expires_at", "next_attempt_at"]
    )
    _close_attempt(batch, outcome=BatchStatus.FAILED, now=now, error=error)
    return batch


def batches_requeue_due(*, job_id: int | None = None) -> list[int]:
    """failed -> queued for every batch whose backoff has passed; returns their ids."""
    due = Batch.objects.filter(status=BatchStatus.FAILED, next_attempt_at__lte=timezone.now())
    if job_id is not None:
        due = due.filter(job_id=job_id)
    ids = list(due.values_list("id", flat=True))
    if ids:
        Batch.objects.filter(pk__in=ids, status=BatchStatus.FAILED).update(
            status=BatchStatus.QUEUED
        )
    return ids


def batches_reap_expired() -> list[int]:
    """Running batches whose lease expired (their worker is gone) become failed attempts."""
    reaped = []
    now = timezone.now()
    expired = Batch.objects.filter(status=BatchStatus.RUNNING, lease_expires_at__lt=now)
    for batch_id in expired.values_list("id", flat=True):
        with transaction.atomic():
            batch = (
                Batch.objects.select_for_update(skip_locked=True)
                .select_related("job")
                .filter(pk=batch_id, status=BatchStatus.RUNNING, lease_expires_at__lt=now)
                .first()
            )
            if batch is None:
                continue
            _fail(
                batch,
                error={
                    "type": "LeaseExpired",
                    "message": f"worker {batch.worker or '?'} stopped heartbeating; "
                    f"lease expired at {batch.lease_expires_at.isoformat()}",
                },
            )
            reaped.append(batch.pk)
    return reaped


@transaction.atomic
def batch_retry(*, batch_id: int, actor: str) -> Batch:
    """An operator sends a dead or failed batch back to the queue with a fresh round of attempts."""
    batch = _locked(batch_id)
    if batch.status not in (BatchStatus.DEAD, BatchStatus.FAILED):
        raise Conflict(
            f"batch {batch_id} is {batch.status}; only dead or failed batches are retried"
        )
    batch.status = BatchStatus.QUEUED
    batch.max_attempts = batch.attempt + batch.job.max_attempts
    batch.next_attempt_at = None
    batch.save(update_fields=["status", "max_attempts", "next_attempt_at"])
    return batch


@transaction.atomic
def batch_cancel(*, batch_id: int, actor: str, reason: str = "") -> Batch:
    """queued|running|failed -> cancelled. A running worker then fails its fence at commit."""
    batch = _locked(batch_id)
    if batch.status not in (BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED):
        raise Conflict(f"batch {batch_id} is {batch.status}; it can no longer be cancelled")
    batch.status = BatchStatus.CANCELLED
    batch.lease_expires_at = None
    batch.finished_at = timezone.now()
    batch.error = {**batch.error, "cancelled_by": actor, "reason": reason}
    batch.save(update_fields=["status", "lease_expires_at", "finished_at", "error"])
    return batch


@transaction.atomic
def batch_skip(*, batch_id: int, actor: str, reason: str) -> Batch:
    """dead -> skipped with a reason; the watermark may then move over it."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("reason", "skipping a batch needs a reason")
    job_id = Batch.objects.values_list("job_id", flat=True).filter(pk=batch_id).first()
    if job_id is None:
        raise NotFound(f"batch {batch_id} does not exist")
    watermark = watermarks._lock_watermark(job_id)
    batch = _locked(batch_id)
    if batch.status != BatchStatus.DEAD:
        raise Conflict(f"batch {batch_id} is {batch.status}; only dead batches are skipped")
    batch.status = BatchStatus.SKIPPED
    batch.skip_reason = f"{actor}: {reason}" if actor else reason
    batch.save(update_fields=["status", "skip_reason"])
    if batch.kind == BatchKind.INCREMENTAL:
        watermarks.watermark_advance(watermark=watermark, trigger=batch)
    return batch


def _locked(batch_id: int) -> Batch:
    batch = (
        Batch.objects.select_for_update(of=("self",))
        .select_related("job")
        .filter(pk=batch_id)
        .first()
    )
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    return batch


def _fence(batch: Batch, attempt: int, *, require_lease: bool) -> None:
    if batch.status != BatchStatus.RUNNING:
        raise StaleAttempt(f"batch {batch.pk} is {batch.status}, not running")
    if batch.attempt != attempt:
        raise StaleAttempt(
            f"batch {batch.pk} is on attempt {batch.attempt}; attempt {attempt} may not report"
        )
    if require_lease and batch.lease_expires_at <= timezone.now():
        raise StaleAttempt(
            f"batch {batch.pk} attempt {attempt}: lease expired at "
            f"{batch.lease_expires_at.isoformat()}"
        )


def _close_attempt(batch: Batch, *, outcome: str, now, error: dict | None = None) -> None:
    BatchAttempt.objects.filter(batch=batch, number=batch.attempt).update(
        finished_at=now, outcome=outcome, error=error or {}
    )


def _complete_backfill_if_done(backfill_id: int) -> None:
    open_batches = Batch.objects.filter(backfill_id=backfill_id).exclude(
        status__in=[BatchStatus.SUCCEEDED, BatchStatus.SKIPPED, BatchStatus.CANCELLED]
    )
    if not open_batches.exists():
        Backfill.objects.filter(pk=backfill_id, status=BackfillStatus.RUNNING).update(
            status=BackfillStatus.COMPLETED
        )
