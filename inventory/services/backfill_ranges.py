"""Backfill ranges: the item ids a backfill covers, given as ids or as a time range.

A time range (`time_start`/`time_end`) is turned into ids here, by `backfill_range_for_times`,
for the API, the dashboard and the admin alike; what a time means depends on the job's source
(`backfill_time_basis`).
"""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max, Min

from inventory.models import (
    Asset,
    Batch,
    Connector,
    ConnectorKind,
    Job,
)
from inventory.services.errors import InvalidInput
from inventory.services.instants import instant_checked
from inventory.sources import table as source_table
from inventory.sources.registry import source_name

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
    return instant_checked(parsed, field=field, given=value)


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
