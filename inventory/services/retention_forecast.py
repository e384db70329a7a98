"""The retention-breach forecast: per job whose source forgets data, when at the current rates it
starts losing data, or that it is safe, with the inputs the forecast used.

The kind's probe (its `retention_probe()`, `sources/<kind>/retention.py`) reads the source's metadata only (retention
settings, oldest and newest positions, when positions were written) in bounded time; the job's
side is read here (the oldest item it or an open backfill still needs, its recent read rate from
its watermark events); the arithmetic is `retention_model` (pure, tested by simulation). Beat
refreshes every job's row (`retention_forecasts_refresh`, FIXED_STEPS in scheduling.py); the job
page, the overview's alert strip, the API, the CLI and /metrics read the stored row.
"""

import logging
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from inventory.models import (
    OPEN_STATUSES,
    Asset,
    ForecastVerdict,
    Job,
    RetentionForecast,
    Watermark,
    WatermarkEvent,
)
from inventory.services import retention_model as model
from inventory.services.errors import TidemarkError
from inventory.sources.registry import kind_of, retention_kinds
from inventory.sql import gateway

log = logging.getLogger(__name__)

RATE_WINDOW = timedelta(minutes=15)  # a job's read rate: its watermark's moves over this window
RATE_EVENTS = 500  # at most this many watermark events read for it (bounded time per job)


def needed_item(*, job: Job) -> int:
    """The lowest item id the job still needs: its watermark, or an open batch below it (a
    backfill, a restatement, a retry)."""
    below = gateway.job_lowest_open_batch(job_id=job.pk, statuses=OPEN_STATUSES)
    # read now, not from the job object's cached watermark: it moves while a job is read
    lowest = Watermark.objects.values_list("position", flat=True).get(job=job)
    return lowest if below is None else min(lowest, below)


def read_rates(*, job: Job, now: datetime) -> dict[str, float]:
    """Positions a second over the last RATE_WINDOW, up to now (a job that stopped reading has a
    falling rate, 0 once stalled for the window): "items", the job's items committed (a Delta
    version, a Hudi instant each), and for a key_value watermark each key's move (a Kafka
    partition's next offset)."""
    since = now - RATE_WINDOW
    events = list(
        WatermarkEvent.objects.filter(watermark__job=job, created_at__gte=since)
        .order_by("-created_at")
        .values("old_position", "new_position", "old_value", "new_value", "created_at")[
            :RATE_EVENTS
        ]
    )
    if not events:
        return {"items": 0.0}
    first, last = events[-1], events[0]
    seconds = max((now - first["created_at"]).total_seconds(), 1.0)
    lower, upper = first["old_position"], last["new_position"]
    items = Asset.objects.filter(connector_id=job.connector_id, id__gte=lower, id__lt=upper).count()
    rates = {"items": items / seconds}
    start, end = first["old_value"], last["new_value"]
    if isinstance(end, dict):
        if not isinstance(start, dict):  # the job's first commit: count from its end
            start = first["new_value"] if isinstance(first["new_value"], dict) else {}
        for key, value in end.items():
            try:
                moved = float(value) - float(start.get(key, value))
            except (TypeError, ValueError):
                continue
            rates[str(key)] = max(moved, 0.0) / seconds
    return rates


def job_forecast(*, job: Job, now: float | None = None) -> dict:
    """The forecast for one job as stored (verdict, margin_seconds, loss_at, message, inputs),
    computed now. Raises what the probe raises when the source cannot be read."""
    probe = kind_of(job.connector).retention_probe()
    if probe is None:
        raise KeyError(f"job {job.name}'s source keeps its data: it has no retention forecast")
    now = time.time() if now is None else now
    when = datetime.fromtimestamp(now, tz=UTC)
    streams = probe(
        connector=job.connector,
        needed_id=needed_item(job=job),
        rates=read_rates(job=job, now=when),
        now=now,
    )
    if not streams:
        return {
            "verdict": ForecastVerdict.NO_LOSS,
            "margin_seconds": None,
            "loss_at": None,
            "message": "the source keeps its data: no retention deletes what this job reads",
            "inputs": {},
        }
    results = []
    for name, timeline, retention, reader, first, inputs in streams:
        result = model.forecast(timeline=timeline, retention=retention, reader=reader, first=first)
        results.append((name, result, inputs))
    name, worst = model.first_loss([(name, result) for name, result, _ in results])
    margin = None if worst.margin_seconds is None else max(worst.margin_seconds, 0.0)
    message = model.describe(worst)
    if worst.verdict in (model.LOST, model.AT_RISK) and len(results) > 1:
        message += f" ({name} first)"
    return {
        "verdict": worst.verdict,
        "margin_seconds": margin,
        "loss_at": None if worst.loss_at is None else datetime.fromtimestamp(worst.loss_at, UTC),
        "message": message,
        "inputs": {
            "streams": [
                {
                    "name": stream_name,
                    "verdict": result.verdict,
                    "margin_seconds": None
                    if result.margin_seconds is None
                    else round(result.margin_seconds, 1),
                    **inputs,
                }
                for stream_name, result, inputs in results
            ]
        },
    }


def retention_forecast_refresh(*, job: Job, now: float | None = None) -> RetentionForecast:
    """Compute the job's forecast and store it; a source that cannot be probed is stored as
    `unknown` with the error, never as safe."""
    try:
        found = job_forecast(job=job, now=now)
        error = ""
    except TidemarkError as exc:
        found = {
            "verdict": ForecastVerdict.UNKNOWN,
            "margin_seconds": None,
            "loss_at": None,
            "message": "no forecast: the source's retention could not be read",
            "inputs": {},
        }
        error = str(exc)
    computed = timezone.now() if now is None else datetime.fromtimestamp(now, tz=UTC)
    row, _ = RetentionForecast.objects.update_or_create(
        job=job, defaults={**found, "error": error, "computed_at": computed}
    )
    return row


def retention_forecasts_refresh() -> dict:
    """Beat's step: every job on a source that forgets data, one at a time, each bounded by its
    probe's timeouts. Returns {job name: verdict}."""
    done = {}
    jobs = Job.objects.filter(connector__kind__in=retention_kinds()).select_related(
        "connector", "watermark"
    )
    for job in jobs.order_by("pk"):
        try:
            done[job.name] = retention_forecast_refresh(job=job).verdict
        except Exception:  # one job's failure must not stop the others' forecasts
            log.exception("retention forecast of job %s failed", job.name)
            done[job.name] = "error"
    return done


def warn_seconds() -> int:
    return settings.RETENTION_WARN_SECONDS


def at_risk_rows():
    """The stored forecasts inside the warning threshold (TIDEMARK_RETENTION_WARN_SECONDS), or
    already losing data, nearest first."""
    return (
        RetentionForecast.objects.filter(
            verdict__in=[ForecastVerdict.AT_RISK, ForecastVerdict.LOST],
            margin_seconds__lte=warn_seconds(),
        )
        .select_related("job")
        .order_by("margin_seconds", "job__name")
    )
