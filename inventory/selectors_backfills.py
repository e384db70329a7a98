"""Reads of backfills: their progress and ETA, the shared throttle's budgets and a scheduling form's
weight histogram (durations come from services/estimates.py).

The API, the dashboard and the admin read through these; nothing here writes.
"""

from django.db.models import (
    Count,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from inventory.models import (
    COMMITTED_STATUSES,
    Backfill,
    BackfillThrottle,
    BatchStatus,
    Job,
)
from inventory.services import estimates
from inventory.templatetags.human import compact


def backfills_with_progress(queryset: QuerySet[Backfill] | None = None) -> QuerySet[Backfill]:
    """Backfills annotated with batch counts and weights: total, done (succeeded or skipped),
    running, dead, cancelled."""
    queryset = Backfill.objects.all() if queryset is None else queryset
    done = Q(batches__status__in=COMMITTED_STATUSES)
    return queryset.select_related("job__connector").annotate(
        batches_total=Count("batches"),
        batches_done=Count("batches", filter=done),
        batches_running=Count("batches", filter=Q(batches__status=BatchStatus.RUNNING)),
        batches_dead=Count("batches", filter=Q(batches__status=BatchStatus.DEAD)),
        batches_cancelled=Count("batches", filter=Q(batches__status=BatchStatus.CANCELLED)),
        weight_total=Coalesce(Sum("batches__weight"), Value(0)),
        weight_done=Coalesce(Sum("batches__weight", filter=done), Value(0)),
    )


def backfill_throttles() -> list[dict]:
    """Every backfill budget with the weight started under it in the last minute."""
    from inventory.services.throttle import throttle_usage

    throttles = list(BackfillThrottle.objects.select_related("connector").order_by("id"))
    if not throttles:
        return []
    used = throttle_usage()
    return [
        {
            "scope": t.connector.name if t.connector_id else "all connectors",
            "budget": t.weight_per_minute,
            "used": used.get(t.connector_id, 0),
            "pct": min(100, 100 * used.get(t.connector_id, 0) / t.weight_per_minute),
        }
        for t in throttles
    ]


def backfill_throttle_for(*, job: Job) -> int | None:
    """The tightest weight-per-minute budget a backfill of `job` draws from, if any."""
    return estimates.throttle_for(connector_id=job.connector_id)


def with_etas(backfills):
    """`backfills` (annotated with their progress), each given `.eta`: the time its batches left
    should take, by the one estimate of services/estimates.py (None when it cannot be judged)."""
    backfills = list(backfills)
    etas = estimates.backfill_etas(backfills)
    for backfill in backfills:
        backfill.eta = etas[backfill.pk]
    return backfills


def weight_histogram(plan, *, budget: int, buckets: int = 10, unit: str = "") -> list[dict]:
    """Planned batches by weight, in `buckets` equal bins from 0 to the budget (a batch of one
    item heavier than the budget lands in an extra bin past it); labels of bytes end in B."""
    size = max(budget / buckets, 1)
    b = "B" if unit == "bytes" else ""
    counts = [0] * (buckets + 1)
    for planned in plan:
        counts[
            min(int(planned.weight // size), buckets - 1) if planned.weight <= budget else buckets
        ] += 1
    top = max(counts) or 1
    return [
        {
            "label": f"> {compact(budget)}{b}"
            if i == buckets
            else f"{compact(round(i * size))}{b}–{compact(round((i + 1) * size))}{b}",
            "count": n,
            "pct": 100 * n / top,
            "over": i == buckets,
        }
        for i, n in enumerate(counts)
        if i < buckets or n
    ]
