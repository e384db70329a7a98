"""Backfill the holes: one action that schedules backfills of exactly a job's dead, cancelled
and never-planned stretches in a range (the gap report), with the same preview as any backfill."""

from dataclasses import dataclass

from django.db import transaction

from inventory.models import Backfill, Job
from inventory.selectors_coverage import holes_to_backfill, job_gaps
from inventory.services.backfills import backfill_create, backfill_preview
from inventory.services.errors import Conflict
from inventory.services.planning import PlannedRange


@dataclass
class HolePlan:
    range_start: int
    range_end: int
    batches: list[PlannedRange]


def holes_preview(
    *,
    job: Job,
    lower: int | None = None,
    upper: int | None = None,
    batch_weight: int | None = None,
    max_items: int | None = None,
) -> list[HolePlan]:
    """The backfills `holes_backfill` would create, one per run of neighbouring holes."""
    ranges = holes_to_backfill(job_gaps(job=job, lower=lower, upper=upper))
    if not ranges:
        raise Conflict(f"job {job.name} has no dead, cancelled or never-planned items there")
    return [
        HolePlan(
            first,
            last,
            backfill_preview(
                job=job,
                range_start=first,
                range_end=last,
                batch_weight=batch_weight,
                max_items=max_items,
            ),
        )
        for first, last in ranges
    ]


@transaction.atomic
def holes_backfill(
    *,
    job: Job,
    lower: int | None = None,
    upper: int | None = None,
    batch_weight: int | None = None,
    max_items: int | None = None,
    max_concurrency: int = 1,
    priority: int = 0,
    reason: str = "",
    actor: str = "",
) -> list[Backfill]:
    """Schedule one backfill per run of holes, all or none."""
    plans = holes_preview(
        job=job, lower=lower, upper=upper, batch_weight=batch_weight, max_items=max_items
    )
    return [
        backfill_create(
            job=job,
            range_start=plan.range_start,
            range_end=plan.range_end,
            batch_weight=batch_weight,
            max_items=max_items,
            max_concurrency=max_concurrency,
            priority=priority,
            reason=reason or "backfill the holes",
            actor=actor,
        )
        for plan in plans
    ]
