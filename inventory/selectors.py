"""Reads of the inventory: lag, blockers, backfill progress, watermark history, batch items.

The API, the dashboard, the admin and /metrics read through these; nothing here writes.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Now

from inventory.models import (
    COMMITTED_STATUSES,
    HOLDING_STATUSES,
    Backfill,
    Batch,
    BatchKind,
    BatchStatus,
    Job,
    MaintenanceRun,
    WatermarkEvent,
)
from inventory.services.errors import InvalidInput
from inventory.services.items import source_for_connector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lag:
    """What a job has not committed yet: items (and their summed weight) at or after the watermark."""

    items: int
    weight: int


def job_lag(*, job: Job) -> Lag | None:
    """None when the job's items cannot be read now (e.g. its external meta table is gone)."""
    position = job.watermark.position
    try:
        items_sql, params = source_for_connector(job.connector).select(
            lower=position, upper=None, limit=None, with_item=False
        )
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), coalesce(sum(weight), 0) FROM ({items_sql}) AS pending", params
            )
            items, weight = cursor.fetchone()
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


def backfills_with_progress(queryset: QuerySet[Backfill] | None = None) -> QuerySet[Backfill]:
    """Backfills annotated with batch counts and weights: total, done (succeeded or skipped),
    running, dead, cancelled."""
    queryset = Backfill.objects.all() if queryset is None else queryset
    done = Q(batches__status__in=COMMITTED_STATUSES)
    return queryset.select_related("job").annotate(
        batches_total=Count("batches"),
        batches_done=Count("batches", filter=done),
        batches_running=Count("batches", filter=Q(batches__status=BatchStatus.RUNNING)),
        batches_dead=Count("batches", filter=Q(batches__status=BatchStatus.DEAD)),
        batches_cancelled=Count("batches", filter=Q(batches__status=BatchStatus.CANCELLED)),
        weight_total=Coalesce(Sum("batches__weight"), Value(0)),
        weight_done=Coalesce(Sum("batches__weight", filter=done), Value(0)),
    )


def watermark_history(*, job: Job) -> QuerySet[WatermarkEvent]:
    """The job's watermark events, newest first."""
    return WatermarkEvent.objects.filter(watermark__job=job).select_related("batch")


def batch_items(*, batch: Batch) -> list[dict]:
    """The items a batch covers, in id order: id, item (a file location or meta-table item), weight."""
    items_sql, params = source_for_connector(batch.job.connector).select(
        lower=batch.span.lower, upper=batch.span.upper, limit=None, with_item=True
    )
    with connection.cursor() as cursor:
        cursor.execute(items_sql, params)
        return [
            {"id": uid, "item": item, "weight": weight} for uid, weight, item in cursor.fetchall()
        ]


def batch_counts_by_job() -> list[tuple[str, str, str, int]]:
    """(job name, kind, status, count) for every combination that has batches (for /metrics)."""
    rows = (
        Batch.objects.values_list("job__name", "kind", "status")
        .annotate(n=Count("id"))
        .order_by("job__name", "kind", "status")
    )
    return list(rows)


def jobs_overview() -> list[Job]:
    """Every job with its connector, watermark, batch counts by status and lag (the dashboard)."""
    counted = {
        status: Count("batches", filter=Q(batches__status=status))
        for status in (
            BatchStatus.QUEUED,
            BatchStatus.RUNNING,
            BatchStatus.FAILED,
            BatchStatus.DEAD,
        )
    }
    jobs = list(
        Job.objects.select_related("connector", "watermark")
        .annotate(**{f"n_{status}": count for status, count in counted.items()})
        .order_by("name")
    )
    for job in jobs:
        # each job reads its own source (asset table or meta table), so lag is one query per job
        job.lag = job_lag(job=job)
    return jobs


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
