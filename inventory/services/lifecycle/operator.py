"""What an operator (or a replay, a correction, a connector reset) does to batches: retry, cancel,
skip, supersede, and a batch born skipped."""

from django.db import transaction
from django.db.models import QuerySet

from inventory.models import OPEN_STATUSES, Backfill, Batch, BatchKind, BatchStatus, Job
from inventory.services import watermarks
from inventory.services.errors import Conflict, NotFound
from inventory.services.lifecycle.shared import (
    batches_transition,
    complete_backfill_if_done,
    locked,
)
from inventory.services.reasons import reason_checked
from inventory.sql import gateway


@transaction.atomic
def batch_retry(*, batch_id: int, actor: str) -> Batch:
    """An operator sends a dead or failed batch back to the queue with a fresh round of attempts."""
    batch = locked(batch_id)
    if batch.status not in (BatchStatus.DEAD, BatchStatus.FAILED):
        raise Conflict(
            f"batch {batch_id} is {batch.status}; only dead or failed batches are retried"
        )
    (retried,) = batches_transition(
        [batch_id],
        from_statuses=(BatchStatus.DEAD, BatchStatus.FAILED),
        to=BatchStatus.QUEUED,
        more_attempts=batch.job.max_attempts,
    )
    return retried


@transaction.atomic
def batch_cancel(*, batch_id: int, actor: str, reason: str = "") -> Batch:
    """queued|running|failed -> cancelled. A running worker then fails its fence at commit."""
    reason = reason_checked(reason)
    backfill_id = Batch.objects.filter(pk=batch_id).values_list("backfill_id", flat=True).first()
    if backfill_id is not None:
        # lock order backfill -> batch: its completion below updates the backfill's row
        Backfill.objects.select_for_update().filter(pk=backfill_id).first()
    batch = locked(batch_id)
    if batch.status not in OPEN_STATUSES:
        raise Conflict(f"batch {batch_id} is {batch.status}; it can no longer be cancelled")
    if batch.published_attempt is not None and batch.replaced_by_id is None:
        # its output is in the sink: cancelling would leave it there uncommitted (invariant 7)
        raise Conflict(
            f"batch {batch_id} has already written its output (attempt "
            f"{batch.published_attempt}); let it commit, or retry it"
        )
    (cancelled,) = batches_transition(
        [batch_id],
        from_statuses=OPEN_STATUSES,
        to=BatchStatus.CANCELLED,
        error={**batch.error, "cancelled_by": actor, "reason": reason},
    )
    if cancelled.backfill_id:
        # a backfill ends when none of its batches is open any more, cancelled ones included
        complete_backfill_if_done(cancelled.backfill_id)
    return cancelled


@transaction.atomic
def batch_skip(*, batch_id: int, actor: str, reason: str) -> Batch:
    """dead -> skipped with a reason; the watermark may then move over it."""
    reason = reason_checked(reason, needed="skipping a batch needs a reason")
    job_id = Batch.objects.values_list("job_id", flat=True).filter(pk=batch_id).first()
    if job_id is None:
        raise NotFound(f"batch {batch_id} does not exist")
    watermark = watermarks.watermark_lock(job_id)
    backfill_id = Batch.objects.filter(pk=batch_id).values_list("backfill_id", flat=True).first()
    if backfill_id is not None:  # lock order watermark -> backfill -> batch
        Backfill.objects.select_for_update().filter(pk=backfill_id).first()
    batch = locked(batch_id)
    if batch.status != BatchStatus.DEAD:
        raise Conflict(f"batch {batch_id} is {batch.status}; only dead batches are skipped")
    (skipped,) = batches_transition(
        [batch_id],
        from_statuses=(BatchStatus.DEAD,),
        to=BatchStatus.SKIPPED,
        skip_reason=f"{actor}: {reason}" if actor else reason,
    )
    if skipped.kind == BatchKind.INCREMENTAL:
        watermarks.watermark_advance(
            watermark=watermark, trigger=skipped, actor=actor, reason=reason
        )
    elif skipped.backfill_id:
        complete_backfill_if_done(skipped.backfill_id)
    return skipped


# ---- many batches at once (a backfill's cancel, a replay, a connector reset, the demo's reset) --

WAITING_STATUSES = (BatchStatus.QUEUED, BatchStatus.FAILED)

# the statuses a replay or a reset supersedes from (never a running batch: the callers refuse)
SUPERSEDABLE_STATUSES = (
    BatchStatus.QUEUED,
    BatchStatus.FAILED,
    BatchStatus.DEAD,
    BatchStatus.SUCCEEDED,
    BatchStatus.SKIPPED,
)


def batches_cancel(batches: QuerySet, *, statuses, error: dict | None = None) -> int:
    """`statuses` -> cancelled for those of `batches` in them, whose rows the caller holds (or
    whose parent row: a backfill). With an `error` (a connector reset) it is stored and the
    batches are marked finished now, by the database's clock. Returns how many changed."""
    ids = list(batches.filter(status__in=statuses).values_list("pk", flat=True))
    if not ids:
        return 0
    return len(
        batches_transition(ids, from_statuses=statuses, to=BatchStatus.CANCELLED, error=error)
    )


def batches_cancel_waiting(batches: QuerySet, *, error: dict | None = None) -> int:
    """queued|failed -> cancelled for the waiting batches among `batches` (batches_cancel)."""
    return batches_cancel(batches, statuses=WAITING_STATUSES, error=error)


def batches_supersede(batches: QuerySet) -> int:
    """`batches` -> superseded: their items are planned and processed again (a replay, a reset).
    The caller chose them (none running) and holds the job's watermark row."""
    ids = list(batches.values_list("pk", flat=True))
    if not ids:
        return 0
    return len(
        batches_transition(ids, from_statuses=SUPERSEDABLE_STATUSES, to=BatchStatus.SUPERSEDED)
    )


def batch_insert_skipped(*, job: Job, lower: int, upper: int, reason: str) -> Batch:
    """A batch born skipped over [lower, upper) (a forward watermark correction covers items no
    batch holds). The caller holds the job's watermark row."""
    return batches_insert(
        job=job, status=BatchStatus.SKIPPED, planned=[(lower, upper, 0, 0)], skip_reason=reason
    )[0]


def batches_insert(
    *,
    job: Job,
    status: str,
    planned,
    backfill: Backfill | None = None,
    snapshot: dict | None = None,
    skip_reason: str = "",
) -> list[Batch]:
    """Batches of `job` (of `backfill` when given) born `status`, one per (lower, upper,
    item_count, weight) of `planned`, in that order (tidemark_batch_insert, the one place a batch
    is born)."""
    return gateway.batch_insert(
        job_id=job.pk,
        backfill_id=None if backfill is None else backfill.pk,
        status=status,
        planned=list(planned),
        snapshot=snapshot or {},
        skip_reason=skip_reason,
    )
