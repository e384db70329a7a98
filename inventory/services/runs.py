"""Running batches: plan a job's work now, hand it to Celery, and carry one batch through Spark.

The task (workers/tasks.py) only calls `batch_execute`; the executors (workers/executors.py) run
the Spark side. Everything that decides *whether* and *what* to run lives here:

- `job_run` plans up to the job's concurrency limit and enqueues the new batches after commit.
- `batch_spec` turns a batch into the plain dict the Spark side reads (no Django beyond here).
- `batch_execute` starts a queued batch (idempotent: anything else is left alone), keeps its lease
  alive while Spark works, and commits or fails it through the core lifecycle.
"""

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import Q
from django.db.models.functions import Now

from inventory.models import (
    Backfill,
    BackfillStatus,
    Batch,
    BatchKind,
    BatchStatus,
    ConnectorKind,
    ConnectorState,
    Job,
    WatermarkType,
)
from inventory.services import lifecycle, outputs, throttle
from inventory.services.errors import Conflict, InvalidInput, NotFound, StaleAttempt
from inventory.services.items import source_for_connector

log = logging.getLogger(__name__)

# How long a queued batch may wait for a worker before a scheduled run sends its task again.
# Sending twice is harmless (only one start wins); never sending would leave it queued forever.
REDISPATCH_AFTER = timedelta(seconds=60)

_FORMAT_BY_SUFFIX = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}


def worker_name() -> str:
    """host:pid of this process: what a batch's `worker` field shows, and what an operator kills."""
    return f"{socket.gethostname()}:{os.getpid()}"


def dispatch(batch_ids: list[int]) -> None:
    """Enqueue run_batch for each id once the current transaction commits (ids only)."""
    if not batch_ids:
        return
    from workers.tasks import run_batch

    ids = list(batch_ids)
    transaction.on_commit(lambda: [send(run_batch, batch_id) for batch_id in ids])


def send(task, *args, countdown: float | None = None) -> None:
    """Enqueue on the configured queue, read at send time (tests point the app at their own)."""
    task.apply_async(args, queue=task.app.conf.task_default_queue, countdown=countdown)


# ---- what a job may name -----------------------------------------------------------------------

EXECUTORS = ("warm", "submit")


def processors_load() -> list[str]:
    """The registered processor names, after importing TIDEMARK_PROCESSOR_MODULES."""
    import importlib

    from django.conf import settings

    from workers.spark.processors import processor_names

    for module in settings.TIDEMARK_PROCESSOR_MODULES:
        importlib.import_module(module)
    return processor_names()


def job_validate_runtime(
    *,
    processor=None,
    params=None,
    sink=None,
    executor=None,
    schedule_cron=None,
    schedule_seconds=None,
) -> None:
    """Check what a job names for running (given fields only); InvalidInput names the field.

    An empty sink is allowed: a job processed outside Tidemark (acquire/succeed) writes nowhere
    Tidemark knows of; a worker run of such a job fails with the sink error stored."""
    if sink:
        from workers.spark.errors import SinkError
        from workers.spark.sinks import check_sink

        try:
            check_sink(sink)
        except SinkError as exc:
            raise InvalidInput("sink", str(exc)) from None
    if processor is not None:
        from workers.spark.processors import ProcessorError, validate_params

        known = processors_load()
        if processor not in known:
            raise InvalidInput(
                "processor",
                f"unknown processor {processor!r}; registered: {', '.join(known) or 'none'}",
            )
        try:
            validate_params(processor, params if params is not None else {})
        except ProcessorError as exc:
            raise InvalidInput("params", str(exc)) from None
    if executor is not None and executor not in EXECUTORS:
        raise InvalidInput(
            "executor", f"unknown executor {executor!r}; use one of {', '.join(EXECUTORS)}"
        )
    if schedule_cron:
        from inventory.services.scheduling import parse_cron

        parse_cron(schedule_cron)
    if schedule_seconds is not None and (
        isinstance(schedule_seconds, bool)
        or not isinstance(schedule_seconds, int)
        or schedule_seconds < 1
    ):
        raise InvalidInput(
            "schedule_seconds", f"must be a positive integer, got {schedule_seconds!r}"
        )


# ---- planning a run ----------------------------------------------------------------------------


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
        .filter(batches__status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED])
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


# ---- the spec the Spark side reads -------------------------------------------------------------


def batch_spec(*, batch: Batch) -> dict:
    """Everything the Spark side needs for one batch, as plain JSON-able data.

    Items: the locations of the connector's items in the batch's span, in id order. The processor,
    its params and the sink come from the batch's config snapshot, so a retry runs what the first
    attempt ran even if the job was edited since.
    """
    job = batch.job
    connector = job.connector
    config = connector.config or {}
    snapshot = batch.config_snapshot or {}
    source = source_for_connector(connector)
    sql, params = source.select(lower=batch.span.lower, upper=batch.span.upper, limit=None)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        items = [row[2] for row in cursor.fetchall()]
    return {
        "job": job.name,
        "batch_id": batch.pk,
        "kind": batch.kind,
        "lower": batch.span.lower,
        "upper": batch.span.upper,
        "items": items,
        "format": config.get("format") or _guess_format(items, connector.kind),
        "read_options": config.get("read_options") or {},
        "schema": config.get("schema"),
        "lineage": bool(config.get("lineage", False)),
        "watermark_column": config.get("watermark_column"),
        "processor": snapshot.get("processor", job.processor),
        "params": snapshot.get("params", job.params) or {},
        "sink": snapshot.get("sink", job.sink) or {},
        "attempt": batch.attempt,
        "watermark_type": job.watermark_type,
        # the sink publishes only through the fence, which names the outputs this one replaces
        "fence": outputs.fence_spec(),
    }


def _guess_format(items: list[str], kind: str) -> str:
    if kind == ConnectorKind.FILES:
        for item in items:
            for suffix, fmt in _FORMAT_BY_SUFFIX.items():
                if str(item).lower().endswith(suffix):
                    return fmt
    return "parquet"


# ---- executing one batch -----------------------------------------------------------------------


class Heartbeat(threading.Thread):
    """Extends a running attempt's lease every lease/3 seconds until stopped or the lease is lost.

    `on_lost` runs once, in this thread, when the core says the attempt no longer holds the lease
    (e.g. the reaper gave the batch to another worker): the executor uses it to cancel Spark work.
    """

    def __init__(self, *, batch_id: int, attempt: int, lease_seconds: int, on_lost=None):
        super().__init__(name=f"heartbeat-{batch_id}", daemon=True)
        self.batch_id = batch_id
        self.attempt = attempt
        self.lease_seconds = lease_seconds
        self.interval = max(lease_seconds / 3, 0.2)
        self.on_lost = on_lost
        self.lost: str = ""
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.wait(self.interval):
                try:
                    lifecycle.batch_heartbeat(
                        batch_id=self.batch_id,
                        attempt=self.attempt,
                        lease_seconds=self.lease_seconds,
                    )
                except (StaleAttempt, NotFound) as exc:
                    self.lost = str(exc)
                    log.warning("batch %s: %s; stopping its work", self.batch_id, exc)
                    if self.on_lost is not None:
                        self.on_lost()
                    return
                except Exception:  # a database hiccup: the next beat may succeed
                    log.exception("batch %s: heartbeat failed", self.batch_id)
                    close_old_connections()
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=self.interval + 5)


class BatchFailure(Exception):
    """An executor's failure, carrying the error dict stored on the batch ({type, message, detail})."""

    def __init__(self, error: dict):
        super().__init__(error.get("message", ""))
        self.error = error


@dataclass
class ExecuteOutcome:
    batch_id: int
    status: str
    attempt: int = 0
    detail: str = ""
    retry_in: float | None = None


# executor(spec, cancel_event) -> result dict; raises BatchFailure
Executor = Callable[[dict, threading.Event], dict]


def batch_execute(
    *, batch_id: int, executor_for: Callable[[str], Executor], worker: str | None = None
) -> ExecuteOutcome:
    """Run one batch end to end, if it is this call's to run.

    Idempotent: a batch that is not queued (already running elsewhere, finished, cancelled) is left
    alone; a failed batch whose backoff has passed is taken back first. A backfill batch waits
    when its backfill already has `max_concurrency` batches running, or is not running.
    """
    worker = worker or worker_name()
    try:
        started = _with_db_retries(
            lambda: _start_if_ours(batch_id=batch_id, worker=worker),
            what="start",
            batch_id=batch_id,
            budget=START_RETRY_SECONDS,
        )
    except (OperationalError, InterfaceError) as exc:
        # nothing started: the task comes back later (and the database still holds the batch)
        return ExecuteOutcome(
            batch_id, "deferred", detail=_first_line(exc), retry_in=DEFERRED_RETRY_SECONDS
        )
    if isinstance(started, ExecuteOutcome):
        return started
    batch = started
    job = batch.job
    lease = job.lease_seconds
    cancel = threading.Event()
    heartbeat = Heartbeat(
        batch_id=batch.pk, attempt=batch.attempt, lease_seconds=lease, on_lost=cancel.set
    )
    heartbeat.start()
    try:
        spec = batch_spec(batch=batch)
        result = executor_for(job.executor)(spec, cancel)
    except BaseException as exc:  # includes Celery's SoftTimeLimitExceeded
        heartbeat.stop()
        error = exc.error if isinstance(exc, BatchFailure) else _error_from(exc)
        if heartbeat.lost:
            return ExecuteOutcome(batch.pk, "stale", batch.attempt, heartbeat.lost)
        failed = _fail(batch, error)
        if not isinstance(exc, Exception):
            raise
        return failed
    # the heartbeat keeps the lease alive while the commit retries a transient database error
    try:
        if heartbeat.lost:
            return ExecuteOutcome(batch.pk, "stale", batch.attempt, heartbeat.lost)
        watermark_value = None
        if job.watermark_type != WatermarkType.INT:
            watermark_value = result.get("watermark")
        outcome = _commit(
            batch,
            result=result,
            watermark_value=watermark_value,
            budget=min(max(lease, 10), COMMIT_RETRY_MAX_SECONDS),
        )
    finally:
        heartbeat.stop()
    if outcome.status == BatchStatus.SUCCEEDED:
        _continue(batch)
    return outcome


# Database errors in the worker's own calls (start, commit, fail) are retried when a retry can cure
# them (a deadlock or serialization victim, a broken or restarted connection) and never escape
# batch_execute: a commit that cannot get a verdict leaves the batch to its lease, so the reaper
# gives it to another attempt, whose sink write replaces this one's output.
START_RETRY_SECONDS = 10.0
COMMIT_RETRY_MAX_SECONDS = 120.0
DEFERRED_RETRY_SECONDS = 5.0


def _with_db_retries(call, *, what: str, batch_id: int, budget: float):
    """`call()`, tried again with backoff after a transient database error until `budget` seconds
    have passed; then the last error is raised. Inside a caller's transaction nothing is retried
    (that transaction is broken and belongs to the caller)."""
    deadline = time.monotonic() + budget
    delay = 0.1
    while True:
        try:
            return call()
        except (OperationalError, InterfaceError) as exc:
            if connection.in_atomic_block or time.monotonic() + delay > deadline:
                raise
            log.warning(
                "batch %s: %s failed (%s); retrying in %.1f s",
                batch_id,
                what,
                _first_line(exc),
                delay,
            )
            # a broken connection is replaced on the next query
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail; it is gone
                pass
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _commit(batch: Batch, *, result: dict, watermark_value, budget: float) -> ExecuteOutcome:
    def succeed() -> ExecuteOutcome:
        try:
            lifecycle.batch_succeed(
                batch_id=batch.pk,
                attempt=batch.attempt,
                result=result,
                watermark_value=watermark_value,
            )
        except InvalidInput as exc:
            # a reported value the job cannot store: failed with the reason, never left running
            return _fail(
                batch,
                {
                    "type": "InvalidWatermark",
                    "message": f"{exc.field}: {exc.message}",
                    "detail": "the batch's output was written; its next attempt replaces it",
                },
            )
        except StaleAttempt as exc:
            # an earlier try may have committed just before its connection broke
            if Batch.objects.filter(
                pk=batch.pk, status=BatchStatus.SUCCEEDED, attempt=batch.attempt
            ).exists():
                return ExecuteOutcome(batch.pk, BatchStatus.SUCCEEDED, batch.attempt)
            return ExecuteOutcome(batch.pk, "stale", batch.attempt, str(exc))
        return ExecuteOutcome(batch.pk, BatchStatus.SUCCEEDED, batch.attempt)

    try:
        return _with_db_retries(succeed, what="commit", batch_id=batch.pk, budget=budget)
    except (OperationalError, InterfaceError) as exc:
        log.error(
            "batch %s attempt %s: no commit verdict (%s); its lease decides",
            batch.pk,
            batch.attempt,
            _first_line(exc),
        )
        return ExecuteOutcome(batch.pk, "unconfirmed", batch.attempt, _first_line(exc))
    except DatabaseError as exc:
        # a refusal no retry cures (e.g. a value the watermark rejects): recorded on the batch
        return _fail(batch, _error_from(exc))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]


def _continue(batch: Batch) -> None:
    """Keep a backlog moving without waiting for the next beat: plan the job's next batches, or
    send the backfill's next ones. A failure here only delays work until the next beat step."""
    try:
        if batch.backfill_id is None:
            job_run(job=batch.job)
        else:
            backfill_pace(backfill=batch.backfill)
    except Exception:
        log.exception("batch %s: planning the follow-up work failed", batch.pk)


def _start_if_ours(*, batch_id: int, worker: str) -> Batch | ExecuteOutcome:
    with transaction.atomic():
        batch = lifecycle.batch_lock_for_start(batch_id)
        if batch is None:
            return ExecuteOutcome(batch_id, "missing", detail="no such batch")
        # a failed batch whose backoff is over is taken back first (due: the database's clock)
        if batch.status == BatchStatus.FAILED and batch.is_due:
            lifecycle.batches_requeue_due(batch_id=batch_id)
            batch.status = BatchStatus.QUEUED
        if batch.status != BatchStatus.QUEUED:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, f"batch is {batch.status}")
        if not batch.is_due:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, "backoff not over")
        blocked = lifecycle.job_blocked_reason(batch.job) or lifecycle.backfill_start_blocked(batch)
        if blocked:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, blocked)
        try:
            return lifecycle.batch_start(batch_id=batch_id, worker=worker)
        except Conflict as exc:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, str(exc))


def _fail(batch: Batch, error: dict) -> ExecuteOutcome:
    try:
        failed = _with_db_retries(
            lambda: lifecycle.batch_fail(batch_id=batch.pk, attempt=batch.attempt, error=error),
            what="recording the failure",
            batch_id=batch.pk,
            budget=min(max(batch.job.lease_seconds, 10), COMMIT_RETRY_MAX_SECONDS),
        )
    except StaleAttempt as exc:
        return ExecuteOutcome(batch.pk, "stale", batch.attempt, str(exc))
    except DatabaseError as exc:
        log.error("batch %s attempt %s: failure not recorded (%s)", batch.pk, batch.attempt, exc)
        return ExecuteOutcome(batch.pk, "unrecorded", batch.attempt, _first_line(exc))
    retry_in = None
    if failed.status == BatchStatus.FAILED and failed.next_attempt_at is not None:
        # both times from the database's clock
        retry_in = max((failed.next_attempt_at - failed.db_now).total_seconds(), 0.0)
    # the stored (redacted) message: the outcome is logged and returned by the Celery task
    return ExecuteOutcome(
        batch.pk, failed.status, batch.attempt, failed.error.get("message", ""), retry_in
    )


def _error_from(exc: BaseException) -> dict:
    message = str(exc).strip() or type(exc).__name__
    return {
        "type": type(exc).__name__,
        "message": message.splitlines()[0][:2000],
        "detail": "".join(traceback.format_exception(exc))[-4000:],
    }
