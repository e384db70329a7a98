"""`table` connectors: a table of another PostgreSQL database, read by an integer or timestamp column.

    {"dsn_env": "SALES_DB_URL", "table": "public.orders", "column": "updated_at",
     "slice_rows": 10000, "lag": 0, "snapshot": false}

The DSN lives in the environment variable `dsn_env` names (of the control plane and the workers),
never in the config. Discovery cuts the column's values from where it stopped up to the source's
current maximum (read from the source when it looks, never from a local clock) minus `lag` into
slices of at most `slice_rows` rows, and registers each slice as an asset (location
`table:<table>:<lower>..<upper>`, weight = its rows, extra {"lower", "upper"}: the half-open column
range). Batches are then weight-bounded runs of slices, planned like any other items: exact and
gap-free, and the rows of a batch are those with lower <= column < upper of its slices.

A row that commits later with a value below what is registered (a timestamp that went backwards, a
long transaction) is late data: a job's `lookback` re-reads that much before each batch's range and
its upsert sink removes the duplicates. `snapshot: true` registers only up to the maximum seen on
the first look; the connector is completed once its jobs committed all of it (orchestration).

A row whose column is NULL, or a timestamp a Python `datetime` cannot hold ('infinity',
'-infinity', a year past 9999), is in no slice: discovery slices the values it can hold, and counts
the other rows into the connector's cursor (`unreadable_rows`, with a warning in the log at every
look that finds some).
"""

import logging
import re
from datetime import UTC, datetime, timedelta

from django.db import transaction
from psycopg2 import sql

from inventory.models import Asset, Batch, Connector
from inventory.services.assets import assets_register
from inventory.services.errors import InvalidInput
from inventory.services.instants import instant_checked
from inventory.sources.config import check_known_keys
from inventory.sources.items import quote_identifier, quote_table
from inventory.sources.remote_database import refuse_own_tables, source_connection
from inventory.sql import gateway, source_query

ALLOWED_KEYS = {
    "dsn_env",
    "table",
    "column",
    "column_type",
    "slice_rows",
    "lag",
    "snapshot",
    "start_value",
    "watermark_column",
    "discover_seconds",
    "lineage",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
log = logging.getLogger(__name__)

DEFAULT_SLICE_ROWS = 10_000
# what a timestamp column's slices can hold: a Python datetime whose successor (a slice's end,
# one microsecond on) is one too
TIME_FIRST = datetime.min
TIME_LAST = datetime.max - timedelta(microseconds=1)
MAX_SLICES_PER_LOOK = 1_000
_INT_TYPES = {"int2", "int4", "int8"}
_TIME_TYPES = {"timestamp": "timestamp", "timestamptz": "timestamptz"}


def validate(config: dict) -> dict:
    check_known_keys(config, ALLOWED_KEYS, kind="table")
    name = config.get("dsn_env")
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise InvalidInput(
            "config.dsn_env", "must name the environment variable that holds the source's DSN"
        )
    _relation(config)
    quote_identifier(config.get("column"), field_name="config.column")
    slice_rows = config.get("slice_rows", DEFAULT_SLICE_ROWS)
    if isinstance(slice_rows, bool) or not isinstance(slice_rows, int) or not 1 <= slice_rows:
        raise InvalidInput("config.slice_rows", "must be a positive integer of rows")
    lag = config.get("lag", 0)
    if isinstance(lag, bool) or not isinstance(lag, int | float) or lag < 0:
        raise InvalidInput(
            "config.lag",
            "must be a non-negative number (seconds for a timestamp column, values for an integer one)",
        )
    if not isinstance(config.get("snapshot", False), bool):
        raise InvalidInput("config.snapshot", "must be true or false")
    checked = dict(config)
    with source_connection(checked, field="config.dsn_env") as conn:
        # what the table is before what its column is: a catalog is refused as such
        refuse_own_tables(
            conn, quote_table(checked["table"], field_name="config.table"), field="config.table"
        )
        checked["column_type"] = _column_type(conn, checked)
    if "start_value" in checked:
        checked["start_value"] = to_json(
            from_json(checked["start_value"], checked["column_type"], field="config.start_value")
        )
    checked.setdefault("watermark_column", checked["column"])
    return checked


def derived(config: dict) -> dict:
    """The keys of a stored config that validate() filled in itself: the column's type, and the
    watermark column when it is the default. A pipelines file that leaves them out matches."""
    filled = {"column_type": config["column_type"]} if "column_type" in config else {}
    if "column" in config and config.get("watermark_column") == config["column"]:
        filled["watermark_column"] = config["column"]
    return filled


def _relation(config: dict) -> sql.Composable:
    """The table as a psycopg2 identifier, after the same check as every relation a user names."""
    quote_table(config.get("table"), field_name="config.table")
    return sql.SQL(".").join(sql.Identifier(part) for part in config["table"].split("."))


def _column_type(conn, config: dict) -> str:
    relation = quote_table(config["table"], field_name="config.table")
    with conn.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [relation])
        if not cursor.fetchone()[0]:
            raise InvalidInput("config.table", f"{config['table']} does not exist in the source")
        cursor.execute(
            source_query("table_column_type"), {"relation": relation, "column": config["column"]}
        )
        row = cursor.fetchone()
    if row is None:
        raise InvalidInput("config.column", f"{config['table']} has no column {config['column']}")
    shown, typname = row
    if typname in _INT_TYPES:
        return "int"
    if typname in _TIME_TYPES:
        return _TIME_TYPES[typname]
    raise InvalidInput(
        "config.column",
        f"{config['column']} is {shown}; a table is read by an integer or timestamp column",
    )


# ---- values of the column: Python <-> JSON ----------------------------------------------------


def from_json(value, column_type: str, *, field: str):
    if column_type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(field, f"must be an integer for an integer column, got {value!r}")
        return value
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise InvalidInput(field, f"must be an ISO 8601 timestamp, got {value!r}") from None
    if column_type == "timestamptz" and parsed.tzinfo is None:
        raise InvalidInput(field, f"{value!r} needs a time zone offset (the column has one)")
    if column_type == "timestamp" and parsed.tzinfo is not None:
        raise InvalidInput(field, f"{value!r} has a time zone; the column has none")
    return instant_checked(parsed, field=field, given=value) if parsed.tzinfo else parsed


def to_json(value):
    return value.isoformat() if isinstance(value, datetime) else value


def _step(column_type: str):
    """The smallest step of the column: the exclusive end just past a value."""
    return 1 if column_type == "int" else timedelta(microseconds=1)


def _lag(config: dict):
    lag = config.get("lag", 0)
    return int(lag) if config["column_type"] == "int" else timedelta(seconds=lag)


# ---- discovery ---------------------------------------------------------------------------------


def discover(connector: Connector) -> int:
    """Register the slices between where the last look stopped and the source's maximum now."""
    config = connector.config
    column_type = config["column_type"]
    cursor_state = dict(connector.cursor or {})
    start = cursor_state.get("next", config.get("start_value"))
    with source_connection(config, field="config.dsn_env") as conn:
        statements = _statements(config)
        with conn.cursor() as cursor:
            cursor.execute(statements["bounds"], _time_domain(column_type))
            low, high, outside = cursor.fetchone()
        _unreadable_note(connector, outside)
        cursor_state = dict(connector.cursor or {})  # with the count just noted
        if high is None:
            return 0  # an empty table: nothing yet
        try:
            horizon = high - _lag(config)
        except OverflowError:
            return 0  # a lag reaching before year 1: no value is old enough yet
        if config.get("snapshot"):
            if "snapshot_until" not in cursor_state:
                cursor_state["snapshot_until"] = to_json(horizon)
            horizon = min(horizon, from_json(cursor_state["snapshot_until"], column_type, field=""))
        lower = low if start is None else from_json(start, column_type, field="config.start_value")
        slices = _slices(conn, statements, config, lower=lower, horizon=horizon)
    if slices:
        cursor_state["next"] = to_json(slices[-1][1])
    if config.get("snapshot") and (not slices or slices[-1][1] > horizon):
        cursor_state["snapshot_closed"] = True
    items = _slice_items(config, slices)
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        if (locked.cursor or {}).get("next") != (connector.cursor or {}).get("next"):
            connector.cursor = locked.cursor  # another look registered these meanwhile
            return 0
        registered = assets_register(connector=locked, items=items)
        locked.cursor = cursor_state
        locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = cursor_state
    return registered


def _time_domain(column_type: str) -> dict | None:
    """The bounds `table_time_bounds` takes: the values a slice of this column can hold (an
    integer column's bounds statement takes none)."""
    if column_type == "int":
        return None
    if column_type == "timestamptz":
        return {"first": TIME_FIRST.replace(tzinfo=UTC), "last": TIME_LAST.replace(tzinfo=UTC)}
    return {"first": TIME_FIRST, "last": TIME_LAST}


def _unreadable_note(connector: Connector, outside: int) -> None:
    """Keep the count of rows no slice can hold in the connector's cursor (`unreadable_rows`,
    "1001" meaning more than 1,000), written only when it changes, and warn while there are any:
    they are never read, and the operator must know why."""
    if outside:
        log.warning(
            "connector %s: %s%s rows hold NULL or a value Tidemark cannot order ('infinity', a "
            "year outside 1-9999) in %s: they are in no slice and never read",
            connector.name,
            "more than " if outside > 1000 else "",
            min(outside, 1000),
            connector.config["column"],
        )
    if (connector.cursor or {}).get("unreadable_rows", 0) == outside:
        return
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        state = dict(locked.cursor or {})
        if outside:
            state["unreadable_rows"] = outside
        else:
            state.pop("unreadable_rows", None)
        locked.cursor = state
        locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = state


def _slice_items(config: dict, slices) -> list[tuple]:
    """The items `assets_register` takes for slices (lower, upper, rows) of the table."""
    return [
        (
            f"table:{config['table']}:{to_json(lower)}..{to_json(upper)}",
            rows,
            {"lower": to_json(lower), "upper": to_json(upper)},
        )
        for lower, upper, rows in slices
    ]


def early_rows_register(connector: Connector, *, lookback: int) -> int:
    """Register the late rows that fall before the first registered slice but inside `lookback`
    (seconds, or values of an integer column) of where registration stopped, as slices of their
    own: the first look started at the column's minimum then (or `start_value`), so a row that
    commits later with a smaller value is in no slice, and no recount would ever see it.

    The range [window start (not below `start_value`), first registered value) is counted on each
    look; once it holds rows they become new slices (new items: the next run processes them) and
    the first registered value moves down to them, so later rows in that range are late rows of
    a registered slice (late_slices). Snapshot connectors are left alone: their set is closed."""
    config = connector.config
    cursor_state = dict(connector.cursor or {})
    if not lookback or config.get("snapshot") or cursor_state.get("next") is None:
        return 0
    column_type = config["column_type"]
    first = _first_registered(connector)
    if first is None:
        return 0
    window = lookback if column_type == "int" else timedelta(seconds=lookback)
    floor = from_json(cursor_state["next"], column_type, field="cursor") - window
    if config.get("start_value") is not None:
        floor = max(floor, from_json(config["start_value"], column_type, field="start_value"))
    if floor >= first:
        return 0
    with source_connection(config, field="config.dsn_env") as conn:
        slices = _slices(
            conn, _statements(config), config, lower=floor, horizon=first - _step(column_type)
        )
    slices = [part for part in slices if part[2]]
    if not slices:
        return 0
    items = _slice_items(config, slices)
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        if (locked.cursor or {}).get("first", cursor_state.get("first")) != cursor_state.get(
            "first"
        ):
            connector.cursor = locked.cursor  # another look registered these meanwhile
            return 0
        registered = assets_register(connector=locked, items=items)
        locked.cursor = {**(locked.cursor or {}), "first": to_json(slices[0][0])}
        locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return registered


def _first_registered(connector: Connector):
    """The smallest column value any registered slice starts at (None: no slice yet)."""
    column_type = connector.config["column_type"]
    first = (connector.cursor or {}).get("first")
    if first is not None:
        return from_json(first, column_type, field="cursor.first")
    # registered before the cursor kept it: slices are registered in column order from there
    extra = (
        Asset.objects.filter(connector=connector).order_by("id").values_list("extra", flat=True)
    ).first()
    return None if extra is None else from_json(extra["lower"], column_type, field="extra.lower")


# how many of the newest slices one look recounts for late rows
MAX_RECOUNT_SLICES = 200


def late_slices(connector: Connector, *, lookback: int) -> list[tuple[Asset, int]]:
    """Registered slices within `lookback` (seconds, or values of an integer column) of where
    registration stopped whose rows in the source now outnumber those counted: late rows, which
    committed after their slice was registered with a value inside it. Each with its count now.

    One count per slice, for at most MAX_RECOUNT_SLICES of the newest; a row updated without
    moving its column value is not seen (read by an `updated_at` column to see updates)."""
    config = connector.config
    column_type = config["column_type"]
    end = (connector.cursor or {}).get("next")
    if end is None or not lookback:
        return []
    window = lookback if column_type == "int" else timedelta(seconds=lookback)
    start = from_json(end, column_type, field="cursor") - window
    recent = list(Asset.objects.filter(connector=connector).order_by("-id")[:MAX_RECOUNT_SLICES])
    inside = [
        asset
        for asset in recent
        if from_json(asset.extra["upper"], column_type, field="extra.upper") > start
    ]
    if not inside:
        return []
    count = sql.SQL(source_query("table_count_range")).format(
        table=_relation(config), column=sql.Identifier(config["column"])
    )
    late = []
    with source_connection(config, field="config.dsn_env") as conn, conn.cursor() as cursor:
        for asset in sorted(inside, key=lambda a: a.pk):
            cursor.execute(
                count,
                {
                    "lower": from_json(asset.extra["lower"], column_type, field="extra.lower"),
                    "upper": from_json(asset.extra["upper"], column_type, field="extra.upper"),
                },
            )
            rows = cursor.fetchone()[0]
            if rows > asset.weight:
                late.append((asset, rows))
    return late


def _statements(config: dict) -> dict[str, sql.Composed]:
    names = {
        "table": _relation(config),
        "column": sql.Identifier(config["column"]),
    }
    return {
        "bounds": sql.SQL(
            source_query("table_bounds" if config["column_type"] == "int" else "table_time_bounds")
        ).format(**names),
        "next_slice": sql.SQL(source_query("table_next_slice")).format(**names),
        "next_value": sql.SQL(source_query("table_next_value")).format(**names),
    }


def _slices(conn, statements, config: dict, *, lower, horizon) -> list[tuple]:
    """(lower, upper, rows) slices covering [lower, horizon] in column order, each of at most
    `slice_rows` rows unless one value alone has more; the last one ends just past `horizon`."""
    rows_per_slice = int(config.get("slice_rows", DEFAULT_SLICE_ROWS))
    step = _step(config["column_type"])
    slices = []
    with conn.cursor() as cursor:
        while lower <= horizon and len(slices) < MAX_SLICES_PER_LOOK:
            cursor.execute(
                statements["next_slice"],
                {"lower": lower, "horizon": horizon, "rows": rows_per_slice},
            )
            boundary, rows = cursor.fetchone()
            if boundary is None:
                if rows:
                    slices.append((lower, horizon + step, rows))
                break
            if boundary == lower:
                # more than slice_rows rows share one value: that value is one slice
                cursor.execute(statements["next_value"], {"value": lower, "horizon": horizon})
                following = cursor.fetchone()[0]
                upper = following if following is not None else horizon + step
                cursor.execute(
                    sql.SQL(source_query("table_count_range")).format(
                        table=_relation(config), column=sql.Identifier(config["column"])
                    ),
                    {"lower": lower, "upper": upper},
                )
                slices.append((lower, upper, cursor.fetchone()[0]))
                lower = upper
                continue
            slices.append((lower, boundary, rows))
            lower = boundary
    return slices


# ---- what the worker reads ---------------------------------------------------------------------


def read_spec(*, connector: Connector, batch: Batch) -> dict:
    config = connector.config
    slices = list(
        Asset.objects.filter(connector=connector, id__gte=batch.span.lower, id__lt=batch.span.upper)
        .order_by("id")
        .values_list("location", "extra")
    )
    lookback = int((batch.config_snapshot or {}).get("lookback", batch.job.lookback) or 0)
    return {
        "items": [location for location, _extra in slices],
        "source": {
            "kind": "table",
            "dsn_env": config["dsn_env"],
            "table": config["table"],
            "column": config["column"],
            "column_type": config["column_type"],
            "slices": [[extra["lower"], extra["upper"]] for _location, extra in slices],
            # seconds for a timestamp column, values for an integer one
            "lookback": lookback,
        },
    }


def time_range_to_ids(connector: Connector, first, last) -> tuple[int, int] | None:
    """The first and last asset id of the slices that hold column values in [first, last]
    (parsed values, see `from_json`), or None when no slice does: a backfill given by time (or
    by value for an integer column). Slices are registered in column order, so the ids between
    hold exactly the slices in the range; one statement in the database, no slice loaded."""
    return gateway.asset_slices_between(
        connector_id=connector.pk,
        column_type=connector.config["column_type"],
        first=first,
        last=last,
    )


def synced_offsets(connector: Connector, partition_column: str, offset_column: str) -> dict:
    """{partition: next offset} of a topic this table was synced from: the largest offset each
    partition's rows carry + 1, over what the connector registered (history then live)."""
    config = connector.config
    field = "config.handover"
    names = {
        "table": _relation(config),
        "column": sql.Identifier(config["column"]),
        "partition": sql.Identifier(quote_identifier(partition_column, field_name=field)[1:-1]),
        "offset": sql.Identifier(quote_identifier(offset_column, field_name=field)[1:-1]),
    }
    upper = (connector.cursor or {}).get("next")
    if upper is None:
        return {}
    with source_connection(config, field=field) as conn, conn.cursor() as cursor:
        cursor.execute(
            sql.SQL(source_query("table_synced_offsets")).format(**names),
            {"upper": from_json(upper, config["column_type"], field=field)},
        )
        return {int(partition): int(offset) + 1 for partition, offset in cursor.fetchall()}
