"""What every part of the batch lifecycle uses: the one call that moves batches
(`batches_transition`, SQL tidemark_batch_transition), "due", "blocked", the row locks and fences."""

from django.db.models import BooleanField, F, Func
from django.db.models.functions import Now

from inventory.models import Backfill, Batch, Connector, Job
from inventory.services import secrets
from inventory.services.errors import NotFound, StaleAttempt
from inventory.sql import gateway

# the most batches one call may start or commit (acquire-batches/, succeed-batches/)
MAX_BATCHES_PER_CALL = 100


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


def batch_due() -> Func:
    """True for a batch that may start now: queued with no backoff pending, or failed with its
    backoff over, by the database's clock. The one definition, shared with the SQL functions
    (tidemark_batch_due in inventory/sql/schema/statuses.sql): `Batch.objects.filter(batch_due())`."""
    return Func(
        F("status"),
        F("next_attempt_at"),
        function="tidemark_batch_due",
        output_field=BooleanField(),
    )


def job_blocked_reason(job: Job) -> str | None:
    """Why the job may not take new work now (paused, its connector not active), or None when it
    may. The one definition is SQL's (tidemark_job_blocked), which acquire refuses with too."""
    return gateway.job_blocked(job_id=job.pk)


def batches_transition(
    ids,
    *,
    from_statuses,
    to: str,
    worker: str | None = None,
    lease_seconds: int | None = None,
    error: dict | None = None,
    skip_reason: str | None = None,
    more_attempts: int | None = None,
) -> list[Batch]:
    """Move the batches `ids` that are in one of `from_statuses` to `to`, with what that move
    writes besides (tidemark_batch_transition); the others stay. Returns the moved batches. A move
    not in the move table is refused (a bug, not an operator's mistake: Conflict)."""
    return gateway.batch_transition(
        ids=ids,
        from_statuses=from_statuses,
        to=to,
        worker=worker,
        lease_seconds=lease_seconds,
        error=error,
        skip_reason=skip_reason,
        more_attempts=more_attempts,
    )


def redacted(batch: Batch, error: dict) -> dict:
    """An error as stored: without the values of the environment variables the job names
    (a DSN echoed in an exception), nor any other credential (inventory.services.secrets)."""
    connector_config = (
        Connector.objects.filter(pk=batch.job.connector_id).values_list("config", flat=True).first()
    )
    names = secrets.env_names(batch.job.params, batch.job.sink, connector_config)
    return secrets.redact(error, names=names)


def locked(batch_id: int) -> Batch:
    batch = (
        Batch.objects.select_for_update(of=("self",))
        .select_related("job")
        .annotate(db_now=Now())
        .filter(pk=batch_id)
        .first()
    )
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    return batch


def fence(batch: Batch, attempt: int, *, require_lease: bool) -> None:
    if batch.status != "running":
        raise StaleAttempt(f"batch {batch.pk} is {batch.status}, not running")
    if batch.attempt != attempt:
        raise StaleAttempt(
            f"batch {batch.pk} is on attempt {batch.attempt}; attempt {attempt} may not report"
        )
    # the database's clock, as leases are written with it (see locked)
    if require_lease and batch.lease_expires_at <= batch.db_now:
        raise StaleAttempt(
            f"batch {batch.pk} attempt {attempt}: lease expired at "
            f"{batch.lease_expires_at.isoformat()}"
        )


def complete_backfill_if_done(backfill_id: int) -> None:
    gateway.backfill_complete_if_done(backfill_id=backfill_id)


def backfills_transition(ids, *, from_statuses, to: str) -> list[Backfill]:
    """Move the backfills `ids` that are in one of `from_statuses` to `to` (the one call that
    writes a backfill's status after its birth: tidemark_backfill_transition, which refuses a move
    not in tidemark_backfill_move). The caller holds their rows. Returns the moved ones."""
    moved = []
    for backfill_id in ids:
        moved += gateway.backfill_transition(
            backfill_id=backfill_id, from_statuses=from_statuses, to=to
        )
    return list(Backfill.objects.filter(pk__in=moved).order_by("pk"))
