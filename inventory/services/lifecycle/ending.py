"""An attempt ends: commit (succeed), fail, the reaper's expired leases, and the requeue of failed
batches whose backoff is over."""

import logging
from dataclasses import dataclass

from django.db import transaction
from django.db.models.functions import Now

from inventory.models import Batch, BatchStatus, Job
from inventory.services import secrets, signals, watermarks
from inventory.services.errors import InvalidInput, NotFound, StaleAttempt
from inventory.services.lifecycle.shared import (
    MAX_BATCHES_PER_CALL,
    batch_due,
    batches_transition,
    fence,
    locked,
    redacted,
)
from inventory.sql import gateway

log = logging.getLogger(__name__)


def batch_succeed(
    *, batch_id: int, attempt: int, result: dict | None = None, watermark_value=None
) -> Batch:
    """Commit a batch whose output is durably written: the status and the watermark move together
    in one transaction, and only for the current attempt holding a live lease (invariants 1, 8).

    tidemark_succeed does it in one call; outside an atomic block that call is also the whole
    transaction, as cheap as the hot path can be.
    """
    if result is not None and not isinstance(result, dict):
        raise InvalidInput("result", "must be an object")
    if watermark_value is not None:
        wm_type = (
            watermarks.Watermark.objects.filter(job__batches__id=batch_id)
            .values_list("type", flat=True)
            .first()
        )
        if wm_type is None:
            raise NotFound(f"batch {batch_id} does not exist")
        watermark_value = watermarks.parse_value(wm_type, watermark_value, field="watermark_value")
    # what an external processor reports is stored and shown: no configured credential in it
    result = secrets.scrub(result or {})
    # a batch that does not exist: NotFound
    batch = gateway.batch_succeed(
        batch_id=batch_id, attempt=attempt, result=result, watermark=watermark_value
    )
    if batch is None:
        with transaction.atomic():
            fence(locked(batch_id), attempt, require_lease=True)
        raise StaleAttempt(f"batch {batch_id} attempt {attempt} may not commit")
    if batch.published_attempt is not None:
        # outputs it replaced may have been read by jobs down a chain (restatements.py listens)
        transaction.on_commit(lambda: _committed(batch.pk))
    return batch


@dataclass(frozen=True)
class Commits:
    """What a succeed of several batches did: the batches committed, in the order given, and why
    each of the others may not commit (batch id -> reason)."""

    committed: list[Batch]
    refused: dict[int, str]


def batches_succeed(*, job: Job, commits: list[dict]) -> Commits:
    """Commit several batches of `job` in one call and one transaction, each as `batch_succeed`
    commits one: its status and the watermark move together, only for the current attempt holding
    a live lease. `commits`: {"id", "attempt", "result" (optional), "watermark_value" (optional)}
    each. A batch whose attempt may not commit is left as it is and named in `refused`; the others
    commit. A batch named twice, of another job, or missing is refused before anything commits
    (InvalidInput naming `batches[i].id`)."""
    if not commits or len(commits) > MAX_BATCHES_PER_CALL:
        raise InvalidInput("batches", f"name 1 to {MAX_BATCHES_PER_CALL} batches")
    for i, c in enumerate(commits):
        for key in ("id", "attempt"):
            if isinstance(c.get(key), bool) or not isinstance(c.get(key), int):
                raise InvalidInput(f"batches[{i}].{key}", "must be an integer")
    ids = [c["id"] for c in commits]
    of_job = set(Batch.objects.filter(pk__in=ids, job_id=job.pk).values_list("pk", flat=True))
    seen: set[int] = set()
    for i, batch_id in enumerate(ids):
        if batch_id in seen:
            raise InvalidInput(f"batches[{i}].id", f"batch {batch_id} is named twice")
        if batch_id not in of_job:
            raise InvalidInput(f"batches[{i}].id", f"job {job.name} has no batch {batch_id}")
        seen.add(batch_id)
    rows = []
    for i, c in enumerate(commits):
        result = c.get("result") or {}
        if not isinstance(result, dict):
            raise InvalidInput(f"batches[{i}].result", "must be an object")
        value = c.get("watermark_value")
        if value is not None:
            value = watermarks.parse_value(
                job.watermark_type, value, field=f"batches[{i}].watermark_value"
            )
        # what an external processor reports is stored and shown: no configured credential in it
        rows.append((c["id"], c["attempt"], secrets.scrub(result), value))
    committed = gateway.batches_succeed(commits=rows)
    done = {batch.pk for batch in committed}
    refused = {}
    for batch_id, attempt, _, _ in rows:
        if batch_id not in done:
            refused[batch_id] = _why_refused(batch_id, attempt)
    for batch in committed:
        if batch.published_attempt is not None:
            transaction.on_commit(lambda pk=batch.pk: _committed(pk))
    return Commits(committed=committed, refused=refused)


def _why_refused(batch_id: int, attempt: int) -> str:
    """Why `attempt` of the batch may not commit, as batch_succeed's StaleAttempt says it."""
    try:
        with transaction.atomic():
            fence(locked(batch_id), attempt, require_lease=True)
    except (StaleAttempt, NotFound) as exc:
        return str(exc)
    return f"batch {batch_id} attempt {attempt} may not commit"


def _committed(batch_id: int) -> None:
    for receiver, outcome in signals.batch_committed.send_robust(sender=Batch, batch_id=batch_id):
        if isinstance(outcome, Exception):  # the commit stands; a receiver keeps what is pending
            log.error("after batch %s committed, %s failed: %r", batch_id, receiver, outcome)


@transaction.atomic
def batch_fail(*, batch_id: int, attempt: int, error: dict) -> Batch:
    """Record a failed attempt: back to the queue after a backoff, or dead when attempts run out."""
    batch = locked(batch_id)
    fence(batch, attempt, require_lease=False)
    return fail_locked(batch, error=error)


def fail_locked(batch: Batch, *, error: dict) -> Batch:
    """running -> failed (a retry after a backoff) or dead, by the one rule tidemark_reap_expired
    applies too (tidemark_batch_transition). `batch` is locked. The failed batch comes with
    `db_now`, the database's clock its retry time was computed from."""
    (failed,) = batches_transition(
        [batch.pk],
        from_statuses=(BatchStatus.RUNNING,),
        to=BatchStatus.FAILED,
        error=redacted(batch, error),
    )
    failed.db_now = failed.finished_at
    return failed


@transaction.atomic
def batches_requeue_due(
    *, job_id: int | None = None, backfill_id: int | None = None, batch_id: int | None = None
) -> list[int]:
    """failed -> queued for every batch whose backoff has passed (of one job, backfill or batch
    when given); returns their ids.

    Rows locked elsewhere (a cancel, a start) are skipped until the next step: this step must
    never wait for a batch row while holding others. A caller may already hold the rows it names
    (a worker's start holds its batch): its own locks do not make it skip them."""
    due = Batch.objects.filter(batch_due(), status=BatchStatus.FAILED)
    if job_id is not None:
        due = due.filter(job_id=job_id)
    if backfill_id is not None:
        due = due.filter(backfill_id=backfill_id)
    if batch_id is not None:
        due = due.filter(pk=batch_id)
    ids = list(
        due.select_for_update(of=("self",), skip_locked=True)
        .order_by("id")
        .values_list("id", flat=True)
    )
    if ids:
        batches_transition(ids, from_statuses=(BatchStatus.FAILED,), to=BatchStatus.QUEUED)
    return ids


# How long the reaper waits for one job's row before it leaves that job to the next run (a job row
# is held for the length of one acquire; only a process frozen inside a transaction holds it longer).
REAPER_LOCK_TIMEOUT = "10s"


def batches_reap_expired() -> list[int]:
    """Running batches whose lease expired (their worker is gone) become failed attempts.

    Per job, in one transaction: the job's row, waited for as every acquirer waits for it (lock
    order job -> batch), then tidemark_reap_expired, the one rule for failing an expired lease
    (acquire applies it too, under the same lock). Waiting instead of skipping is what keeps the
    reaper from being starved by processes acquiring in a loop. Leases are judged with the
    database's clock, never with this process's: a skewed app server reaps nothing live.
    """
    reaped: list[int] = []
    expired = Batch.objects.filter(status=BatchStatus.RUNNING, lease_expires_at__lt=Now())
    for job_id in sorted(set(expired.values_list("job_id", flat=True))):
        try:
            reaped += gateway.job_reap_expired(job_id=job_id, lock_timeout=REAPER_LOCK_TIMEOUT)
        except gateway.LockWaitExpired:
            log.warning(
                "reaper: job %s stayed locked for %s; next run", job_id, REAPER_LOCK_TIMEOUT
            )
    return reaped
