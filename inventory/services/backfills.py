"""Backfills: an exact, weight-bounded plan over a closed id range; preview before creating."""

from django.db import transaction

from inventory.models import Backfill, BackfillStatus, Batch, BatchKind, BatchStatus, Job
from inventory.services.batches import config_snapshot
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
    plan = plan_closed_range(
        source=source_for_connector(job.connector),
        first=range_start,
        last=range_end,
        budget=budget,
        max_items=cap,
    )
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
    snapshot = config_snapshot(job)
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
            backfill.batches.filter(status__in=[BatchStatus.QUEUED, BatchStatus.FAILED]).update(
                status=BatchStatus.CANCELLED
            )
    return backfill
