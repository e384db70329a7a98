"""The batch lifecycle: every change of a batch's status goes through this module.

queued -> running -> succeeded; running -> failed -> queued (backoff) until max_attempts, then dead;
queued|running|failed -> cancelled; dead -> skipped (with a reason); committed -> superseded (a
replay). `attempt` is the fencing token: only the holder of the current attempt, with a live
lease, may commit (invariant 8). Leases and retry times are written and judged with the
database's clock, never this process's; "due" has one definition (`batch_due`, the SQL function
tidemark_batch_due). The SQL functions this module calls (tidemark_acquire, tidemark_succeed,
tidemark_incremental_next) write statuses too; nothing else does.

Rows are locked in one order on every path, job -> watermark -> backfill -> batch (see
docs/architecture.md, "Lock order"); a path may skip a level, never go back up one.
"""

import json
import logging
from contextlib import nullcontext
from datetime import timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import BooleanField, F, Func, QuerySet
from django.db.models.functions import Now

from inventory.models import (
    OPEN_STATUSES,
    Backfill,
    BackfillStatus,
    Batch,
    BatchAttempt,
    BatchKind,
    BatchStatus,
    Connector,
    ConnectorState,
    Job,
)
from inventory.services import secrets, signals, watermarks
from inventory.services.errors import Conflict, InvalidInput, NotFound, StaleAttempt
from inventory.services.planning import (
    BAD_WEIGHT_CODE,
    SOURCE_UNREADABLE_CODES,
    incremental_start,
    plan_incremental,
)
from inventory.sources.registry import source_for_connector
from inventory.sql import query

log = logging.getLogger(__name__)


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
    """Why the job may not take new work now, or None when it may."""
    if job.paused:
        return f"job {job.name} is paused"
    if job.connector.state != ConnectorState.ACTIVE:
        return f"connector {job.connector.name} is {job.connector.state}"
    return None


def batch_plan_next(
    *, job: Job, worker: str = "", lease_seconds: int | None = None
) -> Batch | None:
    """Plan the next incremental batch of `job`, or None if no new item is waiting.

    With a `worker` the batch starts at once as its first attempt (acquire); without, it is
    queued. Runs in the caller's transaction, which must hold the job's row lock.
    """
    source = source_for_connector(job.connector)
    lower, upper = incremental_start(job_id=job.pk, source=source)
    planned = plan_incremental(
        job_id=job.pk,
        source=source,
        lower=lower,
        upper=upper,
        budget=job.batch_weight,
        max_items=job.max_items,
    )
    if planned is None:
        return None
    return _insert_incremental(job, planned, worker=worker, lease_seconds=lease_seconds)


def _insert_incremental(job: Job, planned, *, worker: str, lease_seconds: int | None) -> Batch:
    start = bool(worker)
    params = {
        "job": job.pk,
        "status": BatchStatus.RUNNING if start else BatchStatus.QUEUED,
        "lower": planned.lower,
        "upper": planned.upper,
        "count": planned.item_count,
        "weight": planned.weight,
        "attempt": 1 if start else 0,
        "max_attempts": job.max_attempts,
        "lease": lease_seconds or job.lease_seconds,
        "worker": worker,
        "start": start,
        "snapshot": json.dumps(config_snapshot(job)),
    }
    # inserting the batch and its first attempt is one statement: this is the acquire hot path
    return _one(Batch.objects.raw(query("batch_insert_incremental"), params))


@transaction.atomic
def batches_plan(*, job: Job, limit: int) -> list[Batch]:
    """Plan up to `limit` new incremental batches (a scheduled run), under the job's row lock."""
    job = Job.objects.select_for_update(of=("self",)).select_related("connector").get(pk=job.pk)
    if job_blocked_reason(job):
        return []
    planned = []
    for _ in range(limit):
        batch = batch_plan_next(job=job)
        if batch is None:
            break
        planned.append(batch)
    return planned


def batch_acquire(
    *, job: Job, worker: str, lease_seconds: int | None = None, limit: int | None = None
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
    transaction.
    """
    if not worker:
        raise InvalidInput("worker", "name the worker taking the batch")
    source = source_for_connector(job.connector)
    try:
        with _single_call():
            return _one(
                Batch.objects.raw(
                    query("batch_acquire"),
                    [
                        job.pk,
                        source.planning_query(),
                        worker,
                        lease_seconds or job.lease_seconds,
                        json.dumps(config_snapshot(job)),
                        limit,
                    ],
                )
            )
    except DatabaseError as exc:
        code = getattr(exc.__cause__, "pgcode", None)
        message = str(exc).strip().splitlines()[0]
        if code == "TM409":
            raise Conflict(message) from None
        if code == "TM404":
            raise NotFound(message) from None
        if code == BAD_WEIGHT_CODE:
            raise InvalidInput("weight", message) from None
        # the meta table or a column changed after creation, or the source refused to be read
        # (tidemark_refuse: a job_output's expired commit)
        if code in SOURCE_UNREADABLE_CODES:
            raise InvalidInput(source.config_field, message) from None
        raise


def _start(
    batch_id: int,
    *,
    worker: str,
    lease_seconds: int,
    from_statuses=(BatchStatus.QUEUED, BatchStatus.FAILED),
) -> Batch | None:
    params = {"id": batch_id, "worker": worker, "lease": lease_seconds, "from": list(from_statuses)}
    return _one(Batch.objects.raw(query("batch_start"), params))


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
    with connection.cursor() as cursor:
        cursor.execute(query("job_lock_for_start"), [job_id])
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
    return _start(
        batch_id,
        worker=worker,
        lease_seconds=lease_seconds or batch.job.lease_seconds,
        from_statuses=(BatchStatus.QUEUED,),
    )


def batch_heartbeat(*, batch_id: int, attempt: int, lease_seconds: int | None = None):
    """Extend the lease of a running attempt and return its new expiry; StaleAttempt if lost."""
    with connection.cursor() as cursor:
        cursor.execute(query("batch_heartbeat"), [lease_seconds, batch_id, attempt])
        row = cursor.fetchone()
    if row is None:
        if not Batch.objects.filter(pk=batch_id).exists():
            raise NotFound(f"batch {batch_id} does not exist")
        raise StaleAttempt(f"batch {batch_id} attempt {attempt} no longer holds the lease")
    return row[0]


def batch_succeed(
    *, batch_id: int, attempt: int, result: dict | None = None, watermark_value=None
) -> Batch:
    """Commit a batch whose output is durably written: the status and the watermark move together
    in one transaction, and only for the current attempt holding a live lease (invariants 1, 8).

    tidemark_succeed (migration 0004) does it in one call; outside an atomic block that call is
    also the whole transaction, as cheap as the hot path can be.
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
    params = [
        batch_id,
        attempt,
        json.dumps(result),
        None if watermark_value is None else json.dumps(watermark_value),
    ]
    try:
        with _single_call():
            batch = _one(Batch.objects.raw(query("batch_succeed"), params))
    except DatabaseError as exc:
        if getattr(exc.__cause__, "pgcode", None) == "TM404":
            raise NotFound(f"batch {batch_id} does not exist") from None
        raise
    if batch is None:
        with transaction.atomic():
            _fence(_locked(batch_id), attempt, require_lease=True)
        raise StaleAttempt(f"batch {batch_id} attempt {attempt} may not commit")
    if batch.published_attempt is not None:
        # outputs it replaced may have been read by jobs down a chain (restatements.py listens)
        transaction.on_commit(lambda: _committed(batch.pk))
    return batch


def _committed(batch_id: int) -> None:
    for receiver, outcome in signals.batch_committed.send_robust(sender=Batch, batch_id=batch_id):
        if isinstance(outcome, Exception):  # the commit stands; a receiver keeps what is pending
            log.error("after batch %s committed, %s failed: %r", batch_id, receiver, outcome)


def _single_call():
    """Outside a transaction the call is its own transaction (one round trip); inside a caller's
    transaction it runs in a savepoint, so a refusal leaves that transaction usable."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def _one(raw_queryset) -> Batch | None:
    rows = list(raw_queryset)
    return rows[0] if rows else None


@transaction.atomic
def batch_fail(*, batch_id: int, attempt: int, error: dict) -> Batch:
    """Record a failed attempt: back to the queue after a backoff, or dead when attempts run out."""
    batch = _locked(batch_id)
    _fence(batch, attempt, require_lease=False)
    return _fail(batch, error=error)


def _fail(batch: Batch, *, error: dict) -> Batch:
    """running -> failed (a retry after a backoff) or dead. `batch` is locked and annotated with
    the database's clock (`db_now`): the retry time is compared with it (tidemark_batch_due)."""
    now = batch.db_now
    error = _redacted(batch, error)
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
        Batch.objects.filter(pk__in=ids, status=BatchStatus.FAILED).update(
            status=BatchStatus.QUEUED
        )
    return ids


LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out

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
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [REAPER_LOCK_TIMEOUT])
                cursor.execute(query("job_lock_for_reaper"), [job_id])
                cursor.execute(query("job_reap_expired"), [job_id])
                reaped += [row[0] for row in cursor.fetchall()]
                cursor.execute("SET LOCAL lock_timeout TO DEFAULT")
        except DatabaseError as exc:
            if getattr(exc.__cause__, "pgcode", None) != LOCK_NOT_AVAILABLE:
                raise
            log.warning(
                "reaper: job %s stayed locked for %s; next run", job_id, REAPER_LOCK_TIMEOUT
            )
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
    backfill_id = Batch.objects.filter(pk=batch_id).values_list("backfill_id", flat=True).first()
    if backfill_id is not None:
        # lock order backfill -> batch: its completion below updates the backfill's row
        Backfill.objects.select_for_update().filter(pk=backfill_id).first()
    batch = _locked(batch_id)
    if batch.status not in OPEN_STATUSES:
        raise Conflict(f"batch {batch_id} is {batch.status}; it can no longer be cancelled")
    if batch.published_attempt is not None and batch.replaced_by_id is None:
        # its output is in the sink: cancelling would leave it there uncommitted (invariant 7)
        raise Conflict(
            f"batch {batch_id} has already written its output (attempt "
            f"{batch.published_attempt}); let it commit, or retry it"
        )
    batch.status = BatchStatus.CANCELLED
    batch.lease_expires_at = None
    batch.finished_at = batch.db_now
    batch.error = {**batch.error, "cancelled_by": actor, "reason": reason}
    batch.save(update_fields=["status", "lease_expires_at", "finished_at", "error"])
    if batch.backfill_id:
        # a backfill ends when none of its batches is open any more, cancelled ones included
        _complete_backfill_if_done(batch.backfill_id)
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
    watermark = watermarks.watermark_lock(job_id)
    backfill_id = Batch.objects.filter(pk=batch_id).values_list("backfill_id", flat=True).first()
    if backfill_id is not None:  # lock order watermark -> backfill -> batch
        Backfill.objects.select_for_update().filter(pk=backfill_id).first()
    batch = _locked(batch_id)
    if batch.status != BatchStatus.DEAD:
        raise Conflict(f"batch {batch_id} is {batch.status}; only dead batches are skipped")
    batch.status = BatchStatus.SKIPPED
    batch.skip_reason = f"{actor}: {reason}" if actor else reason
    batch.save(update_fields=["status", "skip_reason"])
    if batch.kind == BatchKind.INCREMENTAL:
        watermarks.watermark_advance(watermark=watermark, trigger=batch, actor=actor, reason=reason)
    elif batch.backfill_id:
        _complete_backfill_if_done(batch.backfill_id)
    return batch


def _redacted(batch: Batch, error: dict) -> dict:
    """An error as stored: without the values of the environment variables the job names
    (a DSN echoed in an exception), nor any other credential (inventory.services.secrets)."""
    connector_config = (
        Connector.objects.filter(pk=batch.job.connector_id).values_list("config", flat=True).first()
    )
    names = secrets.env_names(batch.job.params, batch.job.sink, connector_config)
    return secrets.redact(error, names=names)


def _locked(batch_id: int) -> Batch:
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


def _fence(batch: Batch, attempt: int, *, require_lease: bool) -> None:
    if batch.status != BatchStatus.RUNNING:
        raise StaleAttempt(f"batch {batch.pk} is {batch.status}, not running")
    if batch.attempt != attempt:
        raise StaleAttempt(
            f"batch {batch.pk} is on attempt {batch.attempt}; attempt {attempt} may not report"
        )
    # the database's clock, as leases are written with it (see _locked)
    if require_lease and batch.lease_expires_at <= batch.db_now:
        raise StaleAttempt(
            f"batch {batch.pk} attempt {attempt}: lease expired at "
            f"{batch.lease_expires_at.isoformat()}"
        )


def _close_attempt(batch: Batch, *, outcome: str, now, error: dict | None = None) -> None:
    BatchAttempt.objects.filter(batch=batch, number=batch.attempt).update(
        finished_at=now, outcome=outcome, error=error or {}
    )


def _complete_backfill_if_done(backfill_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(query("backfill_complete_if_done"), [backfill_id])


# ---- many batches at once (a backfill's cancel, a replay, a connector reset) -------------------

WAITING_STATUSES = (BatchStatus.QUEUED, BatchStatus.FAILED)


def batches_cancel_waiting(batches: QuerySet, *, error: dict | None = None) -> int:
    """queued|failed -> cancelled for the waiting batches among `batches`, whose rows the caller
    holds (or whose parent row: a backfill). With an `error` (a connector reset) it is stored and
    the batches are marked finished now, by the database's clock. Returns how many changed."""
    fields = {} if error is None else {"finished_at": Now(), "error": error}
    return batches.filter(status__in=WAITING_STATUSES).update(
        status=BatchStatus.CANCELLED, **fields
    )


def batches_supersede(batches: QuerySet) -> int:
    """`batches` -> superseded: their items are planned and processed again (a replay, a reset).
    The caller chose them (none running) and holds the job's watermark row."""
    return batches.update(status=BatchStatus.SUPERSEDED)


def batch_insert_skipped(*, job: Job, lower: int, upper: int, reason: str) -> Batch:
    """A batch born skipped over [lower, upper) (a forward watermark correction covers items no
    batch holds). The caller holds the job's watermark row."""
    return Batch.objects.create(
        job=job,
        kind=BatchKind.INCREMENTAL,
        status=BatchStatus.SKIPPED,
        span=(lower, upper),
        item_count=0,
        weight=0,
        max_attempts=job.max_attempts,
        skip_reason=reason,
    )
