"""Backfill ranges: the item ids a backfill covers, given as ids or as a time range.

A time range (`time_start`/`time_end`) is turned into ids here, by `backfill_range_for_times`,
for the API, the dashboard and the admin alike; what a time means, how a bound is read and which
ids it selects is the job's source kind's to say (`time_basis`, `time_value`, `ids_for_times`).
"""

from dataclasses import dataclass
from datetime import datetime

from inventory.models import Connector, Job
from inventory.services.errors import InvalidInput
from inventory.sources.base import TimeBasis
from inventory.sources.registry import kind_of

RANGE_FIELDS = ("range_start", "range_end", "time_start", "time_end")


def check_from_start(*, job: Job, first: int, field: str) -> None:
    """A backfill, like a watermark correction, never reaches below the job's start: items
    before `start_position` were never the job's to process."""
    if first < job.start_position:
        raise InvalidInput(
            field,
            f"the job starts at item {job.start_position}; a backfill cannot go below its start "
            f"(the range starts at item {first})",
        )


# ---- ids from times --------------------------------------------------------------------------


@dataclass(frozen=True)
class BackfillRange:
    range_start: int
    range_end: int
    requested: dict | None = None  # {"by", "basis", "start", "end"} when given by time


def backfill_time_basis(connector: Connector) -> TimeBasis:
    """How a time range selects `connector`'s items; InvalidInput("time_start") when its items
    hold no time (its kind's `time_basis`)."""
    return kind_of(connector).time_basis(connector)


def backfill_range_for_times(*, job: Job, time_start, time_end) -> BackfillRange:
    """The closed id range of `job`'s items that hold a time in [time_start, time_end] (ISO 8601
    strings with a UTC offset, or datetimes; integers for a table read by an integer column):
    the first and last such item, so every item of the range is in it."""
    connector = job.connector
    kind = kind_of(connector)
    basis = kind.time_basis(connector)
    first = kind.time_value(connector, time_start, field="time_start")
    last = kind.time_value(connector, time_end, field="time_end")
    _ordered(first, last)
    ids = kind.ids_for_times(connector, first, last)
    shown = [value.isoformat() if isinstance(value, datetime) else value for value in (first, last)]
    if ids is None:
        raise InvalidInput(
            "range_start",
            f"job {job.name} has no item whose {basis.basis} is in [{shown[0]}, {shown[1]}]",
        )
    check_from_start(job=job, first=ids[0], field="time_start")
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


def _ordered(first, last) -> None:
    if last < first:
        raise InvalidInput("time_end", f"must not be before time_start ({first} > {last})")


# ---- plan and create -------------------------------------------------------------------------
