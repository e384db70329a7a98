"""Backfills: an exact, weight-bounded plan over a closed id range; preview before creating.

A backfill always covers item ids. One given by time (`time_start`/`time_end`) is turned into ids
here, by `backfill_range_for_times`, for the API, the dashboard and the admin alike; the time range
it came from is kept on the backfill (`requested`) for display.
"""

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Max, Min

from inventory.models import (
    HOLDING_STATUSES,
    OPEN_STATUSES,
    Asset,
    Backfill,
    BackfillStatus,
    Batch,
    BatchKind,
    BatchStatus,
    Connector,
    ConnectorKind,
    Job,
)
from inventory.services import lifecycle, outputs
from inventory.services.errors import Conflict, InvalidInput, PlanChanged
from inventory.services.jobs import validate_budget
from inventory.services.planning import PlannedRange, plan_closed_range
from inventory.sources import table as source_table
from inventory.sources.registry import source_for_connector, source_name

# the two ways to give a backfill's range: item ids, or times (backfill_range)
RANGE_FIELDS = ("range_start", "range_end", "time_start", "time_end")

# ---- ids from times --------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeBasis:
    """What a time range means for a connector's items."""

    by: str  # "time", or "value" for a table read by an integer column
    basis: str  # what is compared, e.g. "column updated_at", "registration time"
    explanation: str  # one sentence for the forms


@dataclass(frozen=True)
class BackfillRange:
    range_start: int
    range_end: int
    requested: dict | None = None  # {"by", "basis", "start", "end"} when given by time


def backfill_time_basis(connector: Connector) -> TimeBasis:
    """How a time range selects `connector`'s items; InvalidInput("time_start") when its items
    hold no time."""
    config = connector.config or {}
    name = source_name(connector.kind, config)
    if name == "table":
        column = config["column"]
        if config.get("column_type") == "int":
            return TimeBasis(
                "value",
                f"value of column {column}",
                f"the slices holding rows whose {column} (an integer column) is in the range",
            )
        return TimeBasis(
            "time",
            f"column {column}",
            f"the slices holding rows whose {column} is in the range",
        )
    local_files = (
        connector.kind == ConnectorKind.FILES and name is None and "meta_table" not in config
    )
    if local_files or name == "object_store":
        return TimeBasis(
            "time",
            "registration time",
            "files registered between the two times (a file's data times are unknown until "
            "it is read)",
        )
    if name == "meta_table":
        return TimeBasis(
            "time",
            "registration time",
            "meta table rows registered between the two times (when Tidemark saw them)",
        )
    if connector.kind == ConnectorKind.JOB_OUTPUT:
        return TimeBasis(
            "time",
            f"commit time of job {config.get('job')}",
            f"the commits of job {config.get('job')} that finished between the two times",
        )
    if connector.kind == ConnectorKind.KAFKA:
        why = "its slices are offset ranges and carry no timestamps"
    else:
        why = "it plans over a meta table in Tidemark's database, whose rows record no time"
    raise InvalidInput(
        "time_start",
        f"connector {connector.name} ({connector.kind}) cannot be backfilled by time: {why}; "
        "give range_start/range_end (item ids)",
    )


def backfill_range_for_times(*, job: Job, time_start, time_end) -> BackfillRange:
    """The closed id range of `job`'s items that hold a time in [time_start, time_end] (ISO 8601
    strings with a UTC offset, or datetimes; integers for a table read by an integer column):
    the first and last such item, so every item of the range is in it."""
    connector = job.connector
    basis = backfill_time_basis(connector)
    if connector.kind == ConnectorKind.TABLE:
        column_type = connector.config["column_type"]
        first = _table_value(time_start, column_type, field="time_start")
        last = _table_value(time_end, column_type, field="time_end")
        _ordered(first, last)
        ids = source_table.time_range_to_ids(connector, first, last)
    else:
        first = _instant(time_start, field="time_start")
        last = _instant(time_end, field="time_end")
        _ordered(first, last)
        if connector.kind == ConnectorKind.JOB_OUTPUT:
            found = Batch.objects.filter(
                job__name=connector.config.get("job"),
                commit_seq__isnull=False,
                finished_at__gte=first,
                finished_at__lte=last,
            ).aggregate(low=Min("commit_seq"), high=Max("commit_seq"))
        else:
            found = Asset.objects.filter(
                connector=connector, discovered_at__gte=first, discovered_at__lte=last
            ).aggregate(low=Min("id"), high=Max("id"))
        ids = None if found["low"] is None else (found["low"], found["high"])
    shown = [value.isoformat() if isinstance(value, datetime) else value for value in (first, last)]
    if ids is None:
        raise InvalidInput(
            "range_start",
            f"job {job.name} has no item whose {basis.basis} is in [{shown[0]}, {shown[1]}]",
        )
    requested = {"by": basis.by, "basis": basis.basis, "start": shown[0], "end": shown[1]}
    return BackfillRange(ids[0], ids[1], requested)


def backfill_range(
    *, job: Job, range_start=None, range_end=None, time_start=None, time_end=None
) -> BackfillRange:
    """The id range of a backfill given by ids or by time: exactly one of the two pairs."""
    given = {
        name: value
        for name, value in (
            ("range_start", range_start),
            ("range_end", range_end),
            ("time_start", time_start),
            ("time_end", time_end),
        )
        if value not in (None, "")
    }
    by_ids = "range_start" in given or "range_end" in given
    by_time = "time_start" in given or "time_end" in given
    if by_ids and by_time:
        raise InvalidInput(
            "time_start",
            "give either range_start/range_end (item ids) or time_start/time_end, not both",
        )
    if not by_ids and not by_time:
        raise InvalidInput(
            "range_start", "required: range_start/range_end (item ids) or time_start/time_end"
        )
    pair = ("time_start", "time_end") if by_time else ("range_start", "range_end")
    for field, other in (pair, pair[::-1]):
        if field not in given:
            raise InvalidInput(field, f"required with {other}")
    if by_time:
        return backfill_range_for_times(job=job, time_start=time_start, time_end=time_end)
    for field in pair:
        value = given[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(field, f"must be an integer item id, got {value!r}")
    return BackfillRange(range_start, range_end)


def _instant(value, *, field: str) -> datetime:
    """An ISO 8601 time with a UTC offset. A time without one is refused rather than guessed:
    the control plane's zone, the browser's and the data's may all differ."""
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(value.strip())
        except (AttributeError, TypeError, ValueError):
            raise InvalidInput(
                field, f"must be an ISO 8601 time with a UTC offset, got {value!r}"
            ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InvalidInput(
            field,
            f"{value!r} has no UTC offset; add one, e.g. {parsed.isoformat()}+00:00 or ...Z",
        )
    return parsed


def _table_value(value, column_type: str, *, field: str):
    """A value of a table connector's column: an integer for an integer column (a form sends
    text), else a time as the column holds it: with an offset for timestamptz, without for a
    `timestamp` column (whose values have no zone to compare an offset with)."""
    if column_type == "int" and isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InvalidInput(
                field, f"must be an integer value for an integer column, got {value!r}"
            ) from None
    if column_type != "int" and isinstance(value, datetime):
        value = value.isoformat()
    if column_type == "timestamptz" and isinstance(value, str):
        return _instant(value, field=field)
    return source_table.from_json(
        value.strip() if isinstance(value, str) else value, column_type, field=field
    )


def _ordered(first, last) -> None:
    if last < first:
        raise InvalidInput("time_end", f"must not be before time_start ({first} > {last})")


# ---- plan and create -------------------------------------------------------------------------


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


def plan_summary(*, job: Job, span: BackfillRange, plan: list[PlannedRange]) -> dict:
    """A plan as the preview shows it, with its fingerprint: creating the backfill with that
    fingerprint runs exactly this plan or is refused (PlanChanged)."""
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
                "item_count": p.item_count,
                "weight": p.weight,
            }
            for p in plan
        ],
    }


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
) -> Backfill:
    """Create a backfill and all its batches (queued); workers take them at its pace. The range
    is item ids, or a time range (`backfill_range`: exactly one of the two pairs). With the
    `fingerprint` of a preview, the backfill runs exactly that plan or is refused (PlanChanged,
    carrying the plan as it is now) when new items, commits or other batches changed it."""
    if (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise InvalidInput("max_concurrency", "must be a positive integer")
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
        batch_weight=batch_weight,
        max_items=max_items,
    )
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
        backfill = lifecycle.backfills_transition(
            [backfill.pk], from_statuses=allowed[status], to=status
        )[0]
        if status == BackfillStatus.CANCELLED:
            lifecycle.batches_cancel_waiting(backfill.batches.all())
    return backfill
