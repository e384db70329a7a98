"""A job's item range as segments (committed, running, failed, dead, cancelled, never planned):
the job page's coverage strip and the gap report.

One query for the source's extent, one for the batches over the range (index
batch_job_lower_idx) and at most one that counts items in the stretches no batch covers exactly,
so the cost follows the number of batches in the range, never the number of items.
"""

from dataclasses import dataclass, field

from django.db.models import Max
from django.db.models.functions import Upper

from inventory.models import HOLDING_STATUSES, Batch, BatchKind, Job
from inventory.sources.registry import source_for_connector
from inventory.sql import gateway

# When batches overlap (a backfill over incremental batches), an item shows the first state here.
PRECEDENCE = (
    "running",
    "queued",
    "succeeded",
    "skipped",
    "failed",
    "dead",
    "cancelled",
)
# never-planned items below the incremental frontier are a hole; after it, work not planned yet
HOLE, PENDING = "never_planned", "not_planned_yet"
# what "backfill the holes" schedules: a failed batch still has attempts left, so it is listed
# but left to its retries
BACKFILLABLE = ("dead", "cancelled", HOLE)
GAP_STATES = ("failed", *BACKFILLABLE)
MAX_SEGMENTS = 400  # the strip draws at most this many; more are folded into equal buckets


@dataclass
class Segment:
    lower: int  # first item id
    upper: int  # one past the last
    state: str
    items: int = 0
    batch_ids: list[int] = field(default_factory=list)

    @property
    def last(self) -> int:
        return self.upper - 1

    @property
    def first_batch(self) -> int | None:
        return self.batch_ids[0] if self.batch_ids else None


@dataclass
class Coverage:
    lower: int
    upper: int
    frontier: int  # where the incremental lane's planned range ends
    segments: list[Segment]

    @property
    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for seg in self.segments:
            out[seg.state] = out.get(seg.state, 0) + seg.items
        return out

    def strip(self) -> list[dict]:
        """Segments for drawing: width in percent of the id range, folded to MAX_SEGMENTS."""
        span = max(self.upper - self.lower, 1)
        segments = self.segments
        if len(segments) > MAX_SEGMENTS:
            segments = _fold(segments, self.lower, self.upper)
        return [
            {
                "lower": s.lower,
                "last": s.last,
                "state": s.state,
                "items": s.items,
                "width": max((s.upper - s.lower) * 100 / span, 0.05),
                "batch": s.first_batch,
            }
            for s in segments
        ]


def source_extent(job: Job) -> tuple[int, int] | None:
    """(first item id, one past the last) of the job's items from its start position, or None."""
    source = source_for_connector(job.connector)
    where = " AND ".join([*source.where, f"{source.uid} >= %s"])
    ((low, high),) = gateway.item_rows(
        sql=f"SELECT min({source.uid}), max({source.uid}) FROM {source.relation} WHERE {where}",
        params=[*source.params, job.start_position],
    )
    return None if low is None else (int(low), int(high) + 1)


def incremental_frontier(job: Job) -> int:
    held = Batch.objects.filter(
        job=job, kind=BatchKind.INCREMENTAL, status__in=HOLDING_STATUSES
    ).aggregate(end=Max(Upper("span")))["end"]
    return max(held or 0, job.watermark.position)


def job_coverage(*, job: Job, lower: int | None = None, upper: int | None = None) -> Coverage:
    """The job's items in [lower, upper) (default: all of them) as merged segments."""
    extent = source_extent(job)
    frontier = incremental_frontier(job)
    if extent is None and lower is None:
        return Coverage(job.start_position, job.start_position, frontier, [])
    # the job's items start at its start position: ids below it are never a hole of the job
    lower = extent[0] if lower is None else max(lower, job.start_position)
    upper = (extent[1] if extent else lower) if upper is None else upper
    if upper <= lower:
        return Coverage(lower, lower, frontier, [])
    batches = gateway.coverage_batches(job_id=job.pk, lower=lower, upper=upper)
    elementary = _sweep(batches, lower, upper, frontier)
    _count_items(job, elementary)
    return Coverage(lower, upper, frontier, _merge(elementary))


def _sweep(batches, lower: int, upper: int, frontier: int) -> list[Segment]:
    """Elementary stretches between batch boundaries, each with the state that wins there."""
    rank = {state: i for i, state in enumerate(PRECEDENCE)}
    points = {lower, upper}
    if lower < frontier < upper:
        points.add(frontier)
    for _, _, lo, hi, _ in batches:
        points.update(p for p in (lo, hi) if lower < p < upper)
    bounds = sorted(points)
    segments = []
    active: list[tuple] = []  # batches covering the current stretch
    index = 0
    for a, b in zip(bounds, bounds[1:], strict=False):
        while index < len(batches) and batches[index][2] <= a:
            active.append(batches[index])
            index += 1
        active = [row for row in active if row[3] > a]
        if active:
            best = min(active, key=lambda row: (rank.get(row[1], len(rank)), -row[0]))
            seg = Segment(a, b, best[1], batch_ids=[best[0]])
            if best[2] == a and best[3] == b:
                seg.items = best[4]
            else:
                seg.items = -1  # counted below
        else:
            seg = Segment(a, b, HOLE if b <= frontier else PENDING, items=-1)
        segments.append(seg)
    return segments


def _count_items(job: Job, segments: list[Segment]) -> None:
    """Count the items of the stretches no single batch covers exactly, in one query."""
    todo = [seg for seg in segments if seg.items < 0]
    if not todo:
        return
    source = source_for_connector(job.connector)
    lows, highs = [s.lower for s in todo], [s.upper for s in todo]
    if source.relation == "inventory_asset":
        # the assets' prefix sums: two index lookups per stretch, however long it is
        counts = gateway.asset_counts_between(
            connector_id=job.connector_id, ranges=list(zip(lows, highs, strict=True))
        )
    else:
        where = " AND ".join([*source.where, f"{source.uid} >= g.tm_lo", f"{source.uid} < g.tm_hi"])
        counts = dict(
            gateway.item_rows(
                sql="SELECT g.tm_lo, n.n FROM unnest(%s::bigint[], %s::bigint[]) AS g(tm_lo, tm_hi) "
                f"CROSS JOIN LATERAL (SELECT count(*) AS n FROM {source.relation} WHERE {where}) "
                "AS n",
                params=[lows, highs, *source.params],
            )
        )
    for seg in todo:
        seg.items = int(counts.get(seg.lower, 0))


def _merge(segments: list[Segment]) -> list[Segment]:
    """Join neighbours of one state; drop never-planned stretches without items (ids that
    belong to other connectors), so they neither show as holes nor split a segment."""
    merged: list[Segment] = []
    for seg in segments:
        if seg.state in (HOLE, PENDING) and seg.items == 0:
            continue
        last = merged[-1] if merged else None
        if last is not None and last.state == seg.state and last.upper == seg.lower:
            last.upper = seg.upper
            last.items += seg.items
            last.batch_ids.extend(i for i in seg.batch_ids if i not in last.batch_ids[-1:])
        else:
            merged.append(seg)
    return merged


def _fold(segments: list[Segment], lower: int, upper: int) -> list[Segment]:
    """MAX_SEGMENTS equal id buckets, each showing the worst state inside it."""
    worst = {state: i for i, state in enumerate(reversed((*PRECEDENCE, PENDING, HOLE)))}
    worst.update({"dead": -3, "failed": -2, "cancelled": -1, HOLE: 0})
    size = max((upper - lower) // MAX_SEGMENTS, 1)
    buckets: list[Segment] = []
    for seg in segments:
        start = seg.lower
        while start < seg.upper:
            slot = (start - lower) // size
            end = min(seg.upper, lower + (slot + 1) * size)
            if buckets and buckets[-1].lower == lower + slot * size:
                bucket = buckets[-1]
                if worst.get(seg.state, 99) < worst.get(bucket.state, 99):
                    bucket.state = seg.state
                    bucket.batch_ids = seg.batch_ids[:1]
                bucket.items += seg.items if start == seg.lower else 0
                bucket.upper = max(bucket.upper, end)
            else:
                buckets.append(
                    Segment(lower + slot * size, end, seg.state, seg.items, seg.batch_ids[:1])
                )
            start = end
    return buckets


def job_gaps(*, job: Job, lower: int | None = None, upper: int | None = None) -> list[Segment]:
    """The failed, dead, cancelled and never-planned (below the frontier) stretches of a job."""
    coverage = job_coverage(job=job, lower=lower, upper=upper)
    return [seg for seg in coverage.segments if seg.state in GAP_STATES and seg.items > 0]


@dataclass
class SkippedRange:
    """A skipped batch's ids with the items in them now (a forward correction skips ids no item
    had yet; items that arrive there later are counted here, never processed)."""

    lower: int
    upper: int
    items: int
    batch: int
    reason: str

    @property
    def last(self) -> int:
        return self.upper - 1


def job_skipped(
    *, job: Job, lower: int | None = None, upper: int | None = None
) -> list[SkippedRange]:
    """The job's skipped incremental ranges meeting [lower, upper), in id order, each with the
    items it holds now (one counting query for them all)."""
    batches = Batch.objects.filter(job=job, kind=BatchKind.INCREMENTAL, status="skipped")
    if lower is not None:
        batches = batches.filter(span__endswith__gt=lower)
    if upper is not None:
        batches = batches.filter(span__startswith__lt=upper)
    found = list(batches.order_by("span").values_list("pk", "span", "skip_reason")[:MAX_SEGMENTS])
    segments = [Segment(span.lower, span.upper, "skipped", items=-1) for _, span, _ in found]
    _count_items(job, segments)
    return [
        SkippedRange(seg.lower, seg.upper, seg.items, pk, reason)
        for seg, (pk, _, reason) in zip(segments, found, strict=True)
    ]


def holes_to_backfill(gaps: list[Segment]) -> list[tuple[int, int]]:
    """Closed id ranges [first, last] a backfill of the holes covers: neighbouring dead,
    cancelled and never-planned stretches joined, failed ones (still retrying) left out."""
    ranges: list[list[int]] = []
    for seg in gaps:
        if seg.state not in BACKFILLABLE:
            continue
        if ranges and ranges[-1][1] == seg.lower:
            ranges[-1][1] = seg.upper
        else:
            ranges.append([seg.lower, seg.upper])
    return [(lo, hi - 1) for lo, hi in ranges]


# ---- restated ranges -------------------------------------------------------------------------


def job_restatements(*, job: Job, lower: int | None = None, upper: int | None = None):
    """The job's restatements, newest first; with bounds, those meeting [lower, upper)."""
    from inventory.models import Restatement

    records = Restatement.objects.filter(job=job).select_related("job", "backfill").order_by("-id")
    if lower is not None:
        records = records.filter(range_end__gte=lower)
    if upper is not None:
        records = records.filter(range_start__lt=upper)
    return records


def restated_strip(coverage: Coverage, records) -> list[dict]:
    """Restated ranges placed over the coverage strip: left and width in percent of its ids."""
    span = max(coverage.upper - coverage.lower, 1)
    placed = []
    for record in records:
        lo = max(record.range_start, coverage.lower)
        hi = min(record.range_end + 1, coverage.upper)
        if hi <= lo:
            continue
        placed.append(
            {
                "record": record,
                "state": record.state,
                "left": (lo - coverage.lower) * 100 / span,
                "width": max((hi - lo) * 100 / span, 0.3),
            }
        )
    return placed
