"""Jobs: creation with validated budgets; each job gets its watermark in the same transaction."""

from django.db import transaction

from inventory.models import BatchStatus, Connector, Job, WatermarkType
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.job_config import job_validate_runtime
from inventory.services.secrets import check_no_secrets
from inventory.services.watermarks import watermark_create
from inventory.sources.registry import job_delete_check, kind_of


def validate_budget(*, batch_weight, max_items) -> None:
    if isinstance(batch_weight, bool) or not isinstance(batch_weight, int) or batch_weight <= 0:
        raise InvalidInput("batch_weight", f"must be a positive integer, got {batch_weight!r}")
    if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items <= 0:
        raise InvalidInput("max_items", f"must be a positive integer, got {max_items!r}")


@transaction.atomic
def job_create(
    *,
    name: str,
    connector: Connector,
    batch_weight: int,
    max_items: int = 1000,
    watermark_type: str = WatermarkType.INT,
    **options,
) -> Job:
    validate_budget(batch_weight=batch_weight, max_items=max_items)
    for field in ("params", "sink"):
        check_no_secrets(options.get(field), field)
    if watermark_type not in WatermarkType.values:
        raise InvalidInput(
            "watermark_type",
            f"unknown type {watermark_type!r}; use one of {', '.join(WatermarkType.values)}",
        )
    if Job.objects.filter(name=name).exists():
        raise Conflict(f"a job named {name!r} already exists")
    check_watermark_source(connector=connector, watermark_type=watermark_type)
    kind_of(connector).check_new_job(name=name, connector=connector)
    check_lookback(
        connector=connector, lookback=options.get("lookback", 0), sink=options.get("sink")
    )
    unknown = set(options) - {f.name for f in Job._meta.get_fields()}
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a job setting")
    check_freshness_target(options)
    job_validate_runtime(
        processor=options.get("processor", "passthrough"),
        params=options.get("params"),
        sink=options.get("sink"),
        executor=options.get("executor"),
        schedule_cron=options.get("schedule_cron"),
        schedule_seconds=options.get("schedule_seconds"),
        max_concurrency=options.get("max_concurrency"),
        restatements=options.get("restatements"),
        connector=connector,
        max_attempts=options.get("max_attempts"),
        lease_seconds=options.get("lease_seconds"),
    )
    job = Job.objects.create(
        name=name,
        connector=connector,
        batch_weight=batch_weight,
        max_items=max_items,
        watermark_type=watermark_type,
        **options,
    )
    watermark_create(job=job)
    return job


def check_watermark_source(*, connector: Connector, watermark_type: str) -> None:
    """A connector's `watermark_column` reports one maximum per batch: an int or datetime
    watermark can hold it, a key_value or file_set watermark cannot (the worker also checks the
    column's type against the job's before it writes anything: workers/spark/run.py)."""
    kind_of(connector).check_watermark_type(watermark_type)  # e.g. a topic's jobs need key_value
    column = (connector.config or {}).get("watermark_column")
    if column and watermark_type in (WatermarkType.KEY_VALUE, WatermarkType.FILE_SET):
        raise InvalidInput(
            "watermark_type",
            f"connector {connector.name} reads watermark_column {column!r}, one value per batch; "
            f"a {watermark_type} watermark cannot hold it (use int or datetime)",
        )


def check_lookback(*, connector: Connector, lookback, sink) -> None:
    """`lookback` re-reads rows before each batch's range (late data in a table source), so the
    duplicates it reads must meet a sink that removes them: an upsert or coalesce table sink."""
    if isinstance(lookback, bool) or not isinstance(lookback, int) or lookback < 0:
        raise InvalidInput("lookback", f"must be a non-negative integer, got {lookback!r}")
    if not lookback:
        return
    if not kind_of(connector).rereads_window:
        raise InvalidInput(
            "lookback",
            f"connector {connector.name} is not a table read by a column; only those re-read a "
            "window before each batch",
        )
    sink = sink or {}
    if sink.get("kind") != "postgres" or sink.get("mode", "upsert") == "append":
        raise InvalidInput(
            "lookback",
            "re-read rows must be de-duplicated by key: use a postgres sink in upsert or "
            "coalesce mode with the table's key",
        )


def check_freshness_target(settings: dict) -> None:
    """A freshness target (docs/throttle.md) is a positive number of seconds and/or a number of
    items behind (0: none); null or absent means the job has none."""
    seconds = settings.get("freshness_target_seconds")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0
    ):
        raise InvalidInput(
            "freshness_target_seconds", f"must be a positive integer or null, got {seconds!r}"
        )
    items = settings.get("freshness_target_items")
    if items is not None and (isinstance(items, bool) or not isinstance(items, int) or items < 0):
        raise InvalidInput(
            "freshness_target_items", f"must be a non-negative integer or null, got {items!r}"
        )


# Fixed at creation: they decide which items the job's batches and watermark refer to.
FIXED_JOB_FIELDS = ("name", "connector", "watermark_type", "start_position")
# what can change after creation (API, admin); everything else is system-managed
JOB_SETTINGS = (
    "processor",
    "params",
    "sink",
    "batch_weight",
    "max_items",
    "max_attempts",
    "retry_backoff_seconds",
    "lease_seconds",
    "schedule_seconds",
    "schedule_cron",
    "max_concurrency",
    "executor",
    "lookback",
    "restatements",
    "freshness_target_seconds",
    "freshness_target_items",
    "paused",
)


@transaction.atomic
def job_update(*, job: Job, **changes) -> Job:
    """Change a job's settings; batches already planned keep the config they were planned with."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    for field in FIXED_JOB_FIELDS:
        if field in changes and changes[field] != getattr(job, field):
            raise InvalidInput(field, "cannot be changed after the job is created")
        changes.pop(field, None)
    settable = {f.name for f in Job._meta.concrete_fields} - {"id", "created_at", "updated_at"}
    unknown = set(changes) - settable
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a job setting")
    validate_budget(
        batch_weight=changes.get("batch_weight", job.batch_weight),
        max_items=changes.get("max_items", job.max_items),
    )
    check_freshness_target(changes)
    for field in ("params", "sink"):
        check_no_secrets(changes.get(field), field)
    if "lookback" in changes or "sink" in changes:
        check_lookback(
            connector=job.connector,
            lookback=changes.get("lookback", job.lookback),
            sink=changes.get("sink", job.sink),
        )
    if "processor" in changes or "params" in changes:
        job_validate_runtime(
            processor=changes.get("processor", job.processor),
            params=changes.get("params", job.params),
        )
    job_validate_runtime(
        sink=changes.get("sink"),
        executor=changes.get("executor"),
        schedule_cron=changes.get("schedule_cron"),
        schedule_seconds=changes.get("schedule_seconds"),
        max_concurrency=changes.get("max_concurrency"),
        restatements=changes.get("restatements"),
        connector=job.connector,
        max_attempts=changes.get("max_attempts"),
        lease_seconds=changes.get("lease_seconds"),
    )
    for field, value in changes.items():
        setattr(job, field, value)
    if changes:
        job.save(update_fields=[*changes, "updated_at"])
    return job


@transaction.atomic
def job_set_paused(*, job: Job, paused: bool) -> Job:
    """Pause or resume a job (operator): a paused job plans nothing and hands out no batch;
    batches already running finish and commit."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.paused != paused:
        job.paused = paused
        job.save(update_fields=["paused", "updated_at"])
    return job


@transaction.atomic
def job_delete(*, job: Job) -> None:
    """Delete a job with its batches and watermark history; refused while a batch is running."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    running = job.batches.filter(status=BatchStatus.RUNNING).values_list("pk", flat=True).first()
    if running is not None:
        raise Conflict(f"batch {running} of job {job.name} is running; cancel it or wait")
    job_delete_check(job)
    job.delete()
