"""Reads of the inventory: lag, blockers, watermark history, batch items (backfills:
selectors_backfills.py).

The API, the dashboard, the admin and /metrics read through these; nothing here writes.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, transaction
from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Prefetch,
    QuerySet,
)
from django.db.models.functions import Now

from inventory.models import (
    COMMITTED_STATUSES,
    HOLDING_STATUSES,
    Asset,
    Batch,
    BatchKind,
    BatchStatus,
    Connector,
    ConnectorEvent,
    Job,
    MaintenanceRun,
    WatermarkEvent,
)
from inventory.services.errors import InvalidInput
from inventory.sources.items import fetch_items
from inventory.sources.registry import kind_of, source_for_connector
from inventory.sql import gateway

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lag:
    """What a job has not committed yet: items (and their summed weight) at or after the watermark."""

    items: int
    weight: int


def job_lag(*, job: Job) -> Lag | None:
    """None when the job's items cannot be read now (e.g. its external meta table is gone).

    A job reading assets: two index lookups (jobs_lag_by_id). A local meta table read in place
    and a job_output job (its upstream's commits) are counted past the watermark: a user's table
    has no prefix sums, and a commit's weight changes when a later commit replaces its output; so
    these cost their own lag (in rows of their table, in commits), and only on the page showing
    them."""
    # the rule of SQL's tidemark_lag_outside (schema/prefix_sums.sql), for the one job in hand:
    # a local meta table's rows and a job_output job's upstream commits are counted below
    if kind_of(job.connector).items_are_assets(job.connector):
        return jobs_lag([job])[job.pk]
    position = job.watermark.position
    try:
        source = source_for_connector(job.connector)
        items_sql, params = source.select(lower=position, upper=None, limit=None, with_item=False)
        # as a batch's items are read: a user's table as the reader role (fetch_items)
        with transaction.atomic():
            ((items, weight),) = fetch_items(
                source,
                f"SELECT count(*), coalesce(sum(weight), 0) FROM ({items_sql}) AS pending",
                params,
            )
    except (DatabaseError, InvalidInput):
        log.warning("job %s: cannot count its pending items", job.name, exc_info=True)
        return None
    return Lag(items=int(items), weight=int(weight))


def job_blocker(*, job: Job) -> Batch | None:
    """The incremental batch the watermark waits for, if any: the uncommitted batch that starts
    at the watermark, or, when no batch holds the items there, the cancelled batch whose range
    waits to be planned again (its hole; an emptied hole is skipped by the next plan)."""
    position = job.watermark.position
    incremental = Batch.objects.filter(job=job, kind=BatchKind.INCREMENTAL)
    held = incremental.filter(status__in=HOLDING_STATUSES, span__startswith=position).first()
    if held is not None:
        return None if held.status in COMMITTED_STATUSES else held
    return (
        incremental.filter(status=BatchStatus.CANCELLED, span__contains=position)
        .order_by("-id")
        .first()
    )


def job_batch_counts(*, job: Job) -> dict[str, int]:
    rows = Batch.objects.filter(job=job).values("status").annotate(n=Count("id"))
    counts = {status: 0 for status in BatchStatus.values}
    counts.update({row["status"]: row["n"] for row in rows})
    return counts


def connectors_with_rows(connectors: QuerySet[Connector]) -> QuerySet[Connector]:
    """Connectors with what their dashboard row shows: how many jobs read each (`job_count`; the
    jobs themselves are the overview's, filtered by connector and paged) and the last state
    change (`last_events`, at most one), in two queries whatever the number of connectors and
    jobs."""
    return connectors.annotate(job_count=Count("jobs")).prefetch_related(
        Prefetch(
            "events", queryset=ConnectorEvent.objects.order_by("-id")[:1], to_attr="last_events"
        ),
    )


def connector_item_count(*, connector: Connector) -> int:
    """How many items the connector has registered: its last asset's running count (one index
    lookup, queries.sql: assets_known_size), not a count of its assets (millions of rows)."""
    return gateway.assets_known_size(connector_id=connector.pk).count


def connector_jobs_head(*, connector: Connector, limit: int) -> tuple[int, list[str]]:
    """(how many jobs read the connector, the first `limit` of their names by name): a page names
    a few and links the rest (the overview filtered by connector), however many there are."""
    jobs = connector.jobs.order_by("name")
    names = list(jobs.values_list("name", flat=True)[:limit])
    return (len(names) if len(names) < limit else jobs.count()), names


def connector_items(*, connector: Connector) -> QuerySet[Asset]:
    """The connector's registered items (assets); paged newest first over (connector, id)."""
    return Asset.objects.filter(connector=connector)


def connector_history(*, connector: Connector) -> QuerySet[ConnectorEvent]:
    """The connector's state changes (orchestration, pause/resume), newest first."""
    return ConnectorEvent.objects.filter(connector=connector)


def watermark_history(*, job: Job) -> QuerySet[WatermarkEvent]:
    """The job's watermark events, newest first."""
    return WatermarkEvent.objects.filter(watermark__job=job).select_related("batch")


def batch_items(
    *, batch: Batch, offset: int = 0, limit: int | None = None, source=None
) -> list[dict]:
    """The items a batch covers, in id order: id, item (a file location or meta-table item), weight.
    `source`: the job's item source when the caller has built it already (several batches of one
    job: its checks run once, not once per batch)."""
    source = source or source_for_connector(batch.job.connector)
    items_sql, params = source.select(
        lower=batch.span.lower, upper=batch.span.upper, limit=limit, with_item=True
    )
    if offset:
        items_sql, params = f"{items_sql} OFFSET %s", [*params, offset]
    return [
        {"id": uid, "item": item, "weight": weight}
        for uid, weight, item in fetch_items(source, items_sql, params)
    ]


def batches_with_items(batches: list[Batch]) -> list[Batch]:
    """The batches of one job, each with its items (`.items`, as batch_items reads them), the
    job's item source built once for all of them."""
    if not batches:
        return batches
    source = source_for_connector(batches[0].job.connector)
    for batch in batches:
        batch.items = batch_items(batch=batch, source=source)
    return batches


def batch_item_bounds(*, batch: Batch) -> tuple[int, int] | None:
    """The first and last item ids a batch holds. Its span starts where the previous batch
    ended (or at the job's start position), which may lie before its first item: [0, 4) holds
    items 1-3 when ids start at 1. None when no item is left in the span."""
    return batches_item_bounds(job=batch.job, batches=[batch]).get(batch.pk)


def batches_item_bounds(*, job: Job, batches) -> dict[int, tuple[int, int]]:
    """batch_item_bounds of several batches of one job, by one query."""
    spans = [(b.pk, b.span.lower, b.span.upper) for b in batches]
    if not spans:
        return {}
    source = source_for_connector(job.connector)
    sql, params = source.select_bounds(spans)
    rows = fetch_items(source, sql, params)  # a user's table as the reader role
    return {key: (first, last) for key, first, last in rows if first is not None}


def error_summary(error: dict) -> str:
    """One line for a stored error: its type and the first line of its message (a Spark error's
    message starts with the cause; the JVM stack trace follows in `detail`)."""
    if not error:
        return ""
    message = str(error.get("message") or "").strip()
    first = message.splitlines()[0] if message else ""
    kind = error.get("type") or ""
    return f"{kind}: {first}" if kind and first else kind or first


def result_metrics(result: dict) -> list[tuple[str, object]]:
    """A batch result's scalar figures (rows in/out, bytes, ...) as (name, value) pairs."""
    metrics = []
    for key, value in (result or {}).items():
        if isinstance(value, dict):
            metrics += [
                (f"{key}.{k}", v) for k, v in value.items() if not isinstance(v, dict | list)
            ]
        elif not isinstance(value, list):
            metrics.append((key, value))
    return metrics


def watermark_chart_points(*, job: Job, events: list[WatermarkEvent]) -> dict:
    """The watermark over time in its own units, oldest first: the committed item id (int,
    file_set), the source time (datetime) or one series per key (key_value)."""
    points = []
    for event in reversed(events):
        at = event.created_at.isoformat()
        if job.watermark_type == "key_value" and isinstance(event.new_value, dict):
            points.append({"at": at, "keys": event.new_value})
        elif job.watermark_type == "datetime" and isinstance(event.new_value, str):
            points.append({"at": at, "time": event.new_value})
        else:
            points.append({"at": at, "position": event.new_position})
    keys = sorted({key for p in points for key in p.get("keys", {})})[:20]
    return {"type": job.watermark_type, "points": points, "keys": keys}


def connector_state_counts() -> dict[str, int]:
    rows = Connector.objects.values("state").annotate(n=Count("id")).order_by("state")
    return {row["state"]: row["n"] for row in rows}


def open_batch_counts() -> dict[tuple[int, str], int]:
    """(job id, status) -> count of queued, running, failed and dead batches (the partial index
    batch_open_status_idx: committed batches are never read)."""
    return gateway.open_batch_counts()


def jobs_lag(jobs: list[Job]) -> dict[int, Lag | None]:
    """Lag of many jobs: one query for every job reading Tidemark's asset table, one per job
    reading an external meta table."""
    return jobs_lag_by_id([job.pk for job in jobs])


def jobs_lag_by_id(job_ids: list[int]) -> dict[int, Lag | None]:
    """jobs_lag from job ids: the jobs reading an external meta table or another job's commits are
    the only ones loaded as models (each is counted in its own table, see job_lag).

    The jobs reading Tidemark's asset table (files, tables, topics, prefixes, Delta tables, remote
    meta tables through their mirror) cost two index lookups each (asset_connector_id_idx), however
    far behind they are: the prefix sums of the connector's last asset minus those of the last
    asset before the watermark (Asset.cum_count, cum_weight)."""
    lags: dict[int, Lag | None] = {}
    if not job_ids:
        return lags
    lags.update(
        {
            row.job_id: Lag(int(row.items), int(row.weight))
            for row in gateway.jobs_lag(job_ids=job_ids)
        }
    )
    external = [pk for pk in job_ids if pk not in lags]
    if external:
        for job in Job.objects.select_related("connector", "watermark").filter(pk__in=external):
            lags[job.pk] = job_lag(job=job)
    return lags


def jobs_blockers(job_ids: list[int] | None = None) -> dict[int, tuple[int, str]]:
    """Job id -> (id, status) of the batch its watermark waits for (see job_blocker), of these
    jobs or, without ids, of every job at once (queries.sql: jobs_blockers)."""
    return {
        row.job_id: (row.batch_id, row.status) for row in gateway.jobs_blockers(job_ids=job_ids)
    }


@dataclass
class StepStatus:
    """When a periodic step last ran, judged by the database's clock."""

    name: str
    last_run_at: datetime | None
    age_seconds: float | None
    overdue_after: int

    @property
    def overdue(self) -> bool:
        return self.age_seconds is None or self.age_seconds > self.overdue_after


def reaper_status() -> StepStatus:
    from inventory.services.scheduling import REAPER, step_overdue_after

    row = (
        MaintenanceRun.objects.filter(name=REAPER)
        .annotate(age=ExpressionWrapper(Now() - F("last_run_at"), output_field=DurationField()))
        .first()
    )
    return StepStatus(
        name=REAPER,
        last_run_at=row.last_run_at if row else None,
        age_seconds=row.age.total_seconds() if row else None,
        overdue_after=step_overdue_after(REAPER),
    )
