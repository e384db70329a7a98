"""Backfills: an exact, weight-bounded plan over a closed id range; preview before creating."""

from django.db import transaction

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
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.items import source_for_connector
from inventory.services.jobs import validate_budget
from inventory.services.planning import PlannedRange, plan_closed_range


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
    budget = batch_weight if batch_weight is not None else job.batch_weight
    cap = max_items if max_items is not None else job.max_items
    validate_budget(batch_weight=budget, max_items=cap)
    plan = _plan_rewrite(job, first=range_start, last=range_end, budget=budget, max_items=cap)
    if not plan:
        raise Conflict(f"job {job.name} has no items in [{range_start}, {range_end}]")
    return plan


@transaction.atomic
def backfill_create(
    *,
    job: Job,
    range_start: int,
    range_end: int,
    batch_weight: int | None = None,
    max_items: int | None = None,
    max_concurrency: int = 1,
    priority: int = 0,
    reason: str = "",
    actor: str = "",
) -> Backfill:
    """Create a backfill and all its batches (queued); workers take them at its pace."""
    if (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise InvalidInput("max_concurrency", "must be a positive integer")
    plan = backfill_preview(
        job=job,
        range_start=range_start,
        range_end=range_end,
        batch_weight=batch_weight,
        max_items=max_items,
    )
    backfill = Backfill.objects.create(
        job=job,
        range_start=range_start,
        range_end=range_end,
        batch_weight=batch_weight or job.batch_weight,
        max_items=max_items or job.max_items,
        max_concurrency=max_concurrency,
        priority=priority,
        status=BackfillStatus.RUNNING,
        reason=reason,
        created_by=actor,
    )
    snapshot = lifecycle.config_snapshot(job)
    Batch.objects.bulk_create(
        Batch(
            job=job,
            backfill=backfill,
            kind=BatchKind.BACKFILL,
            status=BatchStatus.QUEUED,
            span=(planned.lower, planned.upper),
            item_count=planned.item_count,
            weight=planned.weight,
            max_attempts=job.max_attempts,
            config_snapshot=snapshot,
        )
        for planned in plan
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
        return [
            planned
            for a, b in zip(cuts, cuts[1:], strict=False)
            for planned in plan_closed_range(
                source=source, first=a, last=b - 1, budget=budget, max_items=max_items
            )
        ]

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
    from django.db.models import Max
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
        BackfillStatus.CANCELLED: {
            BackfillStatus.RUNNING,
            BackfillStatus.PAUSED,
            BackfillStatus.PENDING,
        },
    }
    with transaction.atomic():
        backfill = Backfill.objects.select_for_update().get(pk=backfill.pk)
        if backfill.status not in allowed.get(status, set()):
            raise Conflict(f"backfill {backfill.pk} is {backfill.status}; cannot make it {status}")
        backfill.status = status
        backfill.save(update_fields=["status", "updated_at"])
        if status == BackfillStatus.CANCELLED:
            lifecycle.batches_cancel_waiting(backfill.batches.all())
    return backfill
