"""Backfill the holes: one action that schedules backfills of exactly a job's dead, cancelled
and never-planned stretches in a range (the gap report), with the same preview as any backfill."""

import hashlib
from dataclasses import dataclass

from django.db import transaction

from inventory.models import Backfill, Job
from inventory.selectors_coverage import holes_to_backfill, job_gaps
from inventory.services.backfills import (
    BackfillRange,
    backfill_create,
    backfill_preview,
    plan_fingerprint,
    plan_summary,
)
from inventory.services.errors import Conflict, PlanChanged
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


def holes_fingerprint(*, job: Job, plans: list[HolePlan]) -> str:
    """Names the exact set of backfills a holes preview showed (each plan's own fingerprint)."""
    text = ",".join(plan_fingerprint(job=job, plan=plan.batches) for plan in plans)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def holes_summary(*, job: Job, plans: list[HolePlan]) -> dict:
    """The holes preview as the API and the forms show it, with its fingerprint."""
    return {
        "job": job.name,
        "fingerprint": holes_fingerprint(job=job, plans=plans),
        "backfills": [
            plan_summary(
                job=job, span=BackfillRange(plan.range_start, plan.range_end), plan=plan.batches
            )
            for plan in plans
        ],
    }


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
    fingerprint: str | None = None,
) -> list[Backfill]:
    """Schedule one backfill per run of holes, all or none. With the `fingerprint` of a holes
    preview, exactly those backfills or none (PlanChanged carrying the holes as they are now)."""
    plans = holes_preview(
        job=job, lower=lower, upper=upper, batch_weight=batch_weight, max_items=max_items
    )
    if fingerprint is not None and fingerprint != holes_fingerprint(job=job, plans=plans):
        now = holes_summary(job=job, plans=plans)
        shown = ", ".join(
            f"ids {b['range_start']}..{b['range_end']} in {b['batch_count']} batches"
            for b in now["backfills"]
        )
        raise PlanChanged(
            f"the holes changed since they were previewed (fingerprint {fingerprint}): they are "
            f"now {len(plans)} backfill(s): {shown} (fingerprint {now['fingerprint']}); check "
            "them and backfill again",
            plan=now,
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
            fingerprint=plan_fingerprint(job=job, plan=plan.batches),
        )
        for plan in plans
    ]
