"""Backfills: an exact, weight-bounded plan over a closed id range; preview before creating.

A backfill always covers item ids. One given by time (`time_start`/`time_end`) is turned into ids
by `backfill_ranges.backfill_range_for_times` (re-exported here for the API, the dashboard and the
admin); the time range it came from is kept on the backfill (`requested`) for display.
"""

import hashlib
import json

from django.db import transaction
from django.db.models import Max

from inventory.models import (
    HOLDING_STATUSES,
    OPEN_STATUSES,
    Backfill,
    BackfillStatus,
    Batch,
    BatchKind,
    BatchStatus,
    Job,
)
from inventory.services import lifecycle, outputs
from inventory.services.backfill_ranges import (  # noqa: F401 (the API, forms and admin read them here)
    RANGE_FIELDS,
    BackfillRange,
    TimeBasis,
    backfill_range,
    backfill_range_for_times,
    backfill_time_basis,
    check_from_start,
)
from inventory.services.errors import Conflict, InvalidInput, PlanChanged
from inventory.services.jobs import validate_budget
from inventory.services.planning import PlannedRange, plan_closed_range
from inventory.services.reasons import reason_checked
from inventory.sources.registry import source_for_connector
from inventory.sql import gateway


def backfill_preview(
    *,
    job: Job,
    range_start: int,
    range_end: int,
    batch_weight: int | None = None,
    max_items: int | None = None,
) -> list[PlannedRange]:
    """The batches a backfill of [range_start, range_end] would run, without creating anything."""
    for field, value in (("range_start", range_start), ("range_end", range_end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(field, f"must be an integer item id, got {value!r}")
    if range_end < range_start:
        raise InvalidInput("range_end", f"the range is empty: {range_end} is before {range_start}")
    check_from_start(job=job, first=range_start, field="range_start")
    budget = batch_weight if batch_weight is not None else job.batch_weight
    cap = max_items if max_items is not None else job.max_items
    validate_budget(batch_weight=budget, max_items=cap)
    plan = _plan_rewrite(job, first=range_start, last=range_end, budget=budget, max_items=cap)
    if not plan:
        raise Conflict(f"job {job.name} has no items in [{range_start}, {range_end}]")
    return plan


def plan_summary(*, job: Job, span: BackfillRange, plan: list[PlannedRange]) -> dict:
    """A plan as the preview shows it, with its fingerprint: creating the backfill with that
    fingerprint runs exactly this plan or is refused (PlanChanged)."""
    bounds = _item_bounds(job, plan)
    return {
        "job": job.name,
        "range_start": span.range_start,
        "range_end": span.range_end,
        "requested": span.requested,
        "batch_count": len(plan),
        "total_items": sum(p.item_count for p in plan),
        "total_weight": sum(p.weight for p in plan),
        "weight_unit": job.connector.weight_unit,
        "fingerprint": plan_fingerprint(job=job, plan=plan),
        "batches": [
            {
                "range_start": p.lower,
                "range_end": p.upper - 1,
                "first_item": bounds.get(i, (None, None))[0],
                "last_item": bounds.get(i, (None, None))[1],
                "item_count": p.item_count,
                "weight": p.weight,
            }
            for i, p in enumerate(plan)
        ],
    }


def _item_bounds(job: Job, plan: list[PlannedRange]) -> dict[int, tuple[int, int]]:
    """Plan index -> the first and last item id each batch holds (its range starts where the one
    before it ended, or where the backfill was asked to start, which may lie before its first
    item: [0, 4) holds items 1-3), by one query."""
    if not plan:
        return {}
    sql, params = source_for_connector(job.connector).select_bounds(
        [(i, p.lower, p.upper) for i, p in enumerate(plan)]
    )
    rows = gateway.item_rows(sql=sql, params=params)
    return {key: (first, last) for key, first, last in rows if first is not None}


def plan_fingerprint(*, job: Job, plan: list[PlannedRange]) -> str:
    """Names one exact plan: the job and every batch's range, item count and weight."""
    text = json.dumps([job.pk, [[p.lower, p.upper, p.item_count, p.weight] for p in plan]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@transaction.atomic
def backfill_create(
    *,
    job: Job,
    range_start: int | None = None,
    range_end: int | None = None,
    time_start=None,
    time_end=None,
    batch_weight: int | None = None,
    max_items: int | None = None,
    max_concurrency: int = 1,
    priority: int = 0,
    reason: str = "",
    actor: str = "",
    fingerprint: str | None = None,
    whole: bool = False,
) -> Backfill:
    """Create a backfill and all its batches (queued); workers take them at its pace. The range
    is item ids, or a time range (`backfill_range`: exactly one of the two pairs). With the
    `fingerprint` of a preview, the backfill runs exactly that plan or is refused (PlanChanged,
    carrying the plan as it is now) when new items, commits or other batches changed it.

    `whole` (a restatement carrying the item that restates, restatements.py): one batch over the
    whole widened range, whatever its weight, so the outputs it replaces and the rows that replace
    them reach the sink in one publish."""
    if (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise InvalidInput("max_concurrency", "must be a positive integer")
    reason = reason_checked(reason)
    span = backfill_range(
        job=job,
        range_start=range_start,
        range_end=range_end,
        time_start=time_start,
        time_end=time_end,
    )
    plan = backfill_preview(
        job=job,
        range_start=span.range_start,
        range_end=span.range_end,
        batch_weight=2**62 if whole else batch_weight,
        max_items=2**31 - 1 if whole else max_items,
    )
    if whole and len(plan) > 1:  # the budget is unbounded: only the frontier cut it
        plan = [
            PlannedRange(
                plan[0].lower,
                plan[-1].upper,
                sum(p.item_count for p in plan),
                sum(p.weight for p in plan),
            )
        ]
    if fingerprint is not None and fingerprint != plan_fingerprint(job=job, plan=plan):
        now = plan_summary(job=job, span=span, plan=plan)
        raise PlanChanged(
            f"the plan changed since it was previewed (fingerprint {fingerprint}): it is now "
            f"{now['batch_count']} batches, {now['total_items']} items, weight "
            f"{now['total_weight']} over ids {span.range_start}..{span.range_end} "
            f"(fingerprint {now['fingerprint']}); check it and create the backfill again",
            plan=now,
        )
    backfill = Backfill.objects.create(
        job=job,
        range_start=span.range_start,
        range_end=span.range_end,
        requested=span.requested,
        batch_weight=batch_weight or job.batch_weight,
        max_items=max_items or job.max_items,
        max_concurrency=max_concurrency,
        priority=priority,
        status=BackfillStatus.RUNNING,
        reason=reason,
        created_by=actor,
    )
    lifecycle.batches_insert(
        job=job,
        backfill=backfill,
        status=BatchStatus.QUEUED,
        planned=[(p.lower, p.upper, p.item_count, p.weight) for p in plan],
        snapshot=lifecycle.config_snapshot(job),
    )
    return backfill


def _plan_rewrite(job: Job, *, first: int, last: int, budget: int, max_items: int):
    """The backfill's batches: batches whose output is in the sink are rewritten whole, one
    backfill batch each (the range widens to their boundaries), so each backfill batch replaces
    exactly the outputs it covers when it publishes (docs/guarantees.md); items without an output
    yet are planned by budget, cut where the incremental lane's planned range ends."""
    source = source_for_connector(job.connector)
    lower, upper = first, last + 1
    live = list(outputs.live_outputs(job_id=job.pk, lower=lower, upper=upper))
    if live:
        lower = min(lower, live[0].span.lower)
        upper = max(upper, live[-1].span.upper)
    busy = (
        Batch.objects.filter(
            job=job,
            status__in=OPEN_STATUSES,
            span__overlap=(lower, upper),
        )
        .order_by("span")
        .first()
    )
    if busy is not None:
        raise Conflict(
            f"batch {busy.pk} ({busy.kind}, {busy.status}) is in flight over items "
            f"[{busy.span.lower}, {busy.span.upper}); wait for it or cancel it first"
        )
    frontier = _incremental_frontier(job)

    def by_budget(lo: int, hi: int) -> list[PlannedRange]:
        if lo >= hi:
            return []
        cuts = [lo, *([frontier] if lo < frontier < hi else []), hi]
        planned, start = [], lo
        for end in cuts[1:]:
            part = plan_closed_range(
                source=source, first=start, last=end - 1, budget=budget, max_items=max_items
            )
            if part:
                planned += part
                start = end
            # else: a stretch with no item joins the next one, so the plan still starts at `lo`
        return planned

    plan, cursor = [], lower
    for output in live:
        plan += by_budget(cursor, output.span.lower)
        whole = plan_closed_range(
            source=source,
            first=output.span.lower,
            last=output.span.upper - 1,
            budget=2**62,
            max_items=2**31 - 1,
        )
        plan += [
            PlannedRange(output.span.lower, output.span.upper, w.item_count, w.weight)
            for w in whole
        ]
        cursor = output.span.upper
    plan += by_budget(cursor, upper)
    return plan


def _incremental_frontier(job: Job) -> int:
    """Where the incremental lane's planned range ends (the watermark when nothing is held)."""
    from django.db.models.functions import Upper

    held = Batch.objects.filter(
        job=job, kind=BatchKind.INCREMENTAL, status__in=HOLDING_STATUSES
    ).aggregate(end=Max(Upper("span")))["end"]
    return max(held or 0, job.watermark.position)


def backfill_set_status(*, backfill: Backfill, status: str) -> Backfill:
    """Pause, resume or cancel a backfill; cancelling also cancels its queued batches."""
    allowed = {
        BackfillStatus.PAUSED: {BackfillStatus.RUNNING},
        BackfillStatus.RUNNING: {BackfillStatus.PAUSED},
        BackfillStatus.CANCELLED: {BackfillStatus.RUNNING, BackfillStatus.PAUSED},
    }
    with transaction.atomic():
        backfill = Backfill.objects.select_for_update().get(pk=backfill.pk)
        if backfill.status not in allowed.get(status, set()):
            raise Conflict(f"backfill {backfill.pk} is {backfill.status}; cannot make it {status}")
        backfill = lifecycle.backfills_transition(
            [backfill.pk], from_statuses=allowed[status], to=status
        )[0]
        if status == BackfillStatus.CANCELLED:
            lifecycle.batches_cancel_waiting(backfill.batches.all())
    return backfill
