"""The one module that sends SQL to Tidemark's database.

Every named statement of `queries.sql` and `dashboard.sql` and every call of a `tidemark_*`
function has one function here, keyword-only, with named parameters (the statement's
`%(name)s`); so do the reads an item source composes (`item_rows`: checked identifiers, values as
parameters). What PostgreSQL refuses with a SQLSTATE becomes a domain error by one table,
`SQLSTATE_ERRORS`; rows become typed records (frozen dataclasses, `_read`) or `Batch` models
(`_batches`, which works out the column-to-field mapping once) in one place. No other module runs
SQL on Tidemark's connection: `tests/sql/test_gateway.py` scans for one.

The functions run in the caller's transaction, as the statements did when the services sent them:
a refusable call runs in a savepoint (or, outside a transaction, is its own), so a refusal leaves
the caller's transaction usable.
"""

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

from django.db import DatabaseError, DataError, connection, transaction

from inventory.models import Batch
from inventory.services.errors import Conflict, InvalidInput, NotFound, TidemarkError
from inventory.services.transactions import single_call
from inventory.sql import dashboard_query, json_value, query, source_query

# the field of the item source's config: InvalidInput names it when the source can't be read
SOURCE = "<source>"

# SQLSTATE -> (domain error, the field an InvalidInput names). The codes `TM...` are Tidemark's
# own (RAISE ... USING ERRCODE in inventory/sql/schema). An InvalidInput is what a call over an item
# source (planning, acquire) raises; from any other call the same code stays a database error.
SQLSTATE_ERRORS: dict[str, tuple[type[TidemarkError], str | None]] = {
    # a move not in tidemark_batch_move / tidemark_backfill_move (tidemark_batch_transition)
    "TM400": (Conflict, None),
    # the batch or job named does not exist (tidemark_succeed, tidemark_acquire)
    "TM404": (NotFound, None),
    # the job may take no work now (tidemark_acquire: tidemark_job_blocked's reason)
    "TM409": (Conflict, None),
    # a negative or missing weight (tidemark_plan_batches)
    "22023": (InvalidInput, "weight"),
    # the source refuses to be read (tidemark_refuse: a job_output's expired commit)
    "TM422": (InvalidInput, SOURCE),
    # undefined_table, undefined_column: a meta table that no longer matches its config
    "42P01": (InvalidInput, SOURCE),
    "42703": (InvalidInput, SOURCE),
}

LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out


class LockWaitExpired(TidemarkError):
    """A row lock was not granted within the statement's lock_timeout."""


def _message(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


@contextmanager
def _refusals(*, source_field: str | None = None) -> Iterator[None]:
    """A database refusal as its domain error (SQLSTATE_ERRORS). `source_field`: the call reads an
    item source, whose refusals and bad data (any other DataError) are InvalidInput of that field."""
    try:
        yield
    except DatabaseError as exc:
        code = getattr(exc.__cause__, "pgcode", None)
        error, field = SQLSTATE_ERRORS.get(code, (None, None))
        if error is InvalidInput:
            if source_field is None:
                raise
            raise InvalidInput(source_field if field == SOURCE else field, _message(exc)) from None
        if error is not None:
            raise error(_message(exc)) from None
        if source_field is not None and isinstance(exc, DataError):
            raise InvalidInput(source_field, _message(exc)) from None
        raise


def _json(value) -> str | None:
    return None if value is None else json.dumps(value)


# ---- reading rows ------------------------------------------------------------------------------


def _read(cursor, record: type) -> list:
    """The cursor's rows as `record`s, by position; a field whose type is `JSON` is decoded."""
    decoded = [f.type is JSON for f in fields(record)]
    rows = cursor.fetchall()
    if not any(decoded):
        return [record(*row) for row in rows]
    return [
        record(*(json_value(v) if d else v for v, d in zip(row, decoded, strict=True)))
        for row in rows
    ]


def _scalar(cursor):
    row = cursor.fetchone()
    return None if row is None else row[0]


def _batches(cursor) -> list[Batch]:
    """The cursor's inventory_batch rows as Batch models: what `Batch.objects.raw(...)` gives, but
    with the column-to-field mapping and the converters worked out once per column list (raw()
    redoes them on every call, which cost the hot path's Python side as much as the rest)."""
    rows = cursor.fetchall()
    if not rows:
        return []
    order, converters = _batch_reader(tuple(column[0] for column in cursor.description))
    batches = []
    for row in rows:
        values = [row[index] for index in order]
        for index, functions, expression in converters:
            for function in functions:
                values[index] = function(values[index], expression, connection)
        batches.append(Batch.from_db(connection.alias, None, values))
    return batches


# column list -> (for each concrete field of Batch, in model order, the index of its column;
# the converters to apply, by field index), as Model.from_db takes values in field order
_BATCH_READERS: dict[tuple[str, ...], tuple[list[int], list]] = {}


def _batch_reader(columns: tuple[str, ...]) -> tuple[list[int], list]:
    reader = _BATCH_READERS.get(columns)
    if reader is None:
        model_fields = Batch._meta.concrete_fields
        position = {column: index for index, column in enumerate(columns)}
        if len(columns) != len(model_fields) or any(f.column not in position for f in model_fields):
            raise ValueError(f"not a batch row: {columns}")
        converters = []
        for index, field in enumerate(model_fields):
            expression = field.get_col(Batch._meta.db_table)
            functions = connection.ops.get_db_converters(expression) + expression.get_db_converters(
                connection
            )
            if functions:
                converters.append((index, functions, expression))
        reader = ([position[field.column] for field in model_fields], converters)
        _BATCH_READERS[columns] = reader
    return reader


def _first_batch(sql: str, params: dict) -> Batch | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        batches = _batches(cursor)
    return batches[0] if batches else None


class JSON:
    """Marks a record field read from a json/jsonb column (decoded by `_read`)."""


# ---- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedRange:
    """The half-open id range [lower, upper) of one batch and what it holds."""

    lower: int
    upper: int
    item_count: int
    weight: int


@dataclass(frozen=True)
class IncrementalStart:
    """Where the next incremental batch starts, and the bound it must stay below (None: open)."""

    lower: int
    upper: int | None


@dataclass(frozen=True)
class RegisteredAsset:
    previous_id: int | None
    id: int
    location: str
    discovered_at: Any


@dataclass(frozen=True)
class KnownSize:
    """A connector's last asset: its running count (None: not summed yet) and its id; and
    whether any of its assets is flagged as changed and not yet restated."""

    count: int | None
    max_id: int
    changed: bool = False


@dataclass(frozen=True)
class PositionOfValue:
    exact: int | None
    below: int | None
    below_value: JSON
    above: int | None
    above_value: JSON


@dataclass(frozen=True)
class RecentObject:
    id: int
    location: str
    weight: int
    extra: JSON


@dataclass(frozen=True)
class ReplacedCommits:
    """A connector reading the commits of job `upstream`, the commits a batch replaced, and the
    upstream job's last commit."""

    connector_id: int
    upstream: str
    commit_seqs: list[int]
    through: int | None


@dataclass(frozen=True)
class JobLag:
    job_id: int
    items: int
    weight: int


@dataclass(frozen=True)
class JobBlocker:
    job_id: int
    batch_id: int
    status: str


# ---- the batch lifecycle (schema/transitions.sql, acquire.sql, commit.sql) ---------------------


def job_blocked(*, job_id: int) -> str | None:
    """Why the job may take no new work now, or None (tidemark_job_blocked)."""
    with connection.cursor() as cursor:
        cursor.execute(query("job_blocked"), {"job": job_id})
        return _scalar(cursor)


def batch_transition(
    *,
    ids: Sequence[int],
    from_statuses: Sequence[str],
    to: str,
    worker: str | None = None,
    lease_seconds: int | None = None,
    error: dict | None = None,
    skip_reason: str | None = None,
    more_attempts: int | None = None,
) -> list[Batch]:
    """The batches moved (tidemark_batch_transition); a move not in the move table: Conflict."""
    params = {
        "ids": list(ids),
        "from": [str(status) for status in from_statuses],
        "to": str(to),
        "worker": worker,
        "lease": lease_seconds,
        "error": _json(error),
        "skip_reason": skip_reason,
        "more_attempts": more_attempts,
    }
    with _refusals(), single_call(), connection.cursor() as cursor:
        cursor.execute(query("batch_transition"), params)
        return _batches(cursor)


def batch_insert(
    *,
    job_id: int,
    backfill_id: int | None,
    status: str,
    planned: Sequence[tuple[int, int, int, int]],
    snapshot: dict,
    skip_reason: str,
) -> list[Batch]:
    """New batches born `status`, one per (lower, upper, item_count, weight) (tidemark_batch_insert)."""
    params = {
        "job": job_id,
        "backfill": backfill_id,
        "status": str(status),
        "lowers": [p[0] for p in planned],
        "uppers": [p[1] for p in planned],
        "counts": [p[2] for p in planned],
        "weights": [p[3] for p in planned],
        "snapshot": json.dumps(snapshot),
        "skip_reason": skip_reason,
    }
    with connection.cursor() as cursor:
        cursor.execute(query("batch_insert"), params)
        return _batches(cursor)


def backfill_transition(*, backfill_id: int, from_statuses: Sequence[str], to: str) -> list[int]:
    """The ids moved (0 or 1) by tidemark_backfill_transition."""
    params = {"backfill": backfill_id, "from": [str(s) for s in from_statuses], "to": str(to)}
    with connection.cursor() as cursor:
        cursor.execute(query("backfill_transition"), params)
        return [row[0] for row in cursor.fetchall()]


def backfill_complete_if_done(*, backfill_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(query("backfill_complete_if_done"), {"backfill": backfill_id})


def batch_plan_next(*, job_id: int, items: str, snapshot: dict, source_field: str) -> Batch | None:
    """The next incremental batch planned and queued (tidemark_plan_next), or None. In a
    savepoint: a source refusing to be read leaves the caller's transaction usable."""
    params = {"job": job_id, "items": items, "snapshot": json.dumps(snapshot)}
    with _refusals(source_field=source_field), transaction.atomic():
        return _first_batch(query("batch_plan_next"), params)


def batch_acquire(
    *,
    job_id: int,
    items: str,
    worker: str,
    lease_seconds: int,
    snapshot: dict,
    limit: int | None,
    source_field: str,
) -> Batch | None:
    """The batch started for `worker` (tidemark_acquire), or None when there is no work."""
    params = _acquire_params(job_id, items, worker, lease_seconds, snapshot, limit)
    with _refusals(source_field=source_field), single_call():
        return _first_batch(query("batch_acquire"), params)


def _acquire_params(job_id, items, worker, lease_seconds, snapshot, limit) -> dict:
    """The parameters of an acquire's statement, one batch or several."""
    return {
        "job": job_id,
        "items": items,
        "worker": worker,
        "lease": lease_seconds,
        "snapshot": json.dumps(snapshot),
        "limit": limit,
    }


def batches_acquire(
    *,
    job_id: int,
    items: str,
    worker: str,
    lease_seconds: int,
    snapshot: dict,
    limit: int | None,
    count: int,
    source_field: str,
) -> list[Batch]:
    """Up to `count` batches started for `worker` (tidemark_acquire_batches), in the order they
    started; empty when there is no work."""
    params = _acquire_params(job_id, items, worker, lease_seconds, snapshot, limit)
    params["count"] = count
    with _refusals(source_field=source_field), single_call(), connection.cursor() as cursor:
        cursor.execute(query("batches_acquire"), params)
        return _batches(cursor)


def job_lock_for_start(*, job_id: int) -> None:
    """The job's row, shared: a pause waits for a start in progress."""
    with connection.cursor() as cursor:
        cursor.execute(query("job_lock_for_start"), {"job": job_id})


def batch_heartbeat(*, batch_id: int, attempt: int, lease_seconds: int | None):
    """The running attempt's new lease expiry, or None when it holds no live lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("batch_heartbeat"),
            {"lease": lease_seconds, "batch": batch_id, "attempt": attempt},
        )
        return _scalar(cursor)


def batch_succeed(*, batch_id: int, attempt: int, result: dict, watermark) -> Batch | None:
    """The committed batch (tidemark_succeed), or None when the attempt may not commit."""
    params = {
        "batch": batch_id,
        "attempt": attempt,
        "result": json.dumps(result),
        "watermark": _json(watermark),
    }
    with _refusals(), single_call():
        return _first_batch(query("batch_succeed"), params)


def batches_succeed(*, commits: Sequence[tuple[int, int, dict, Any]]) -> list[Batch]:
    """The batches of `commits` ((batch id, attempt, result, watermark value) each, of one job)
    that committed (tidemark_succeed_batches); the others' attempts may not commit."""
    params = {
        "batches": [c[0] for c in commits],
        "attempts": [c[1] for c in commits],
        "results": [json.dumps(c[2]) for c in commits],
        "values": [_json(c[3]) for c in commits],
    }
    with _refusals(), single_call(), connection.cursor() as cursor:
        cursor.execute(query("batches_succeed"), params)
        return _batches(cursor)


def job_reap_expired(*, job_id: int, lock_timeout: str) -> list[int]:
    """The job's running batches whose lease expired, failed (tidemark_reap_expired), after
    waiting at most `lock_timeout` for the job's row (else LockWaitExpired). Its own transaction
    (or savepoint)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(query("lock_timeout_set"), {"timeout": lock_timeout})
            cursor.execute(query("job_lock_for_reaper"), {"job": job_id})
            cursor.execute(query("job_reap_expired"), {"job": job_id})
            reaped = [row[0] for row in cursor.fetchall()]
            cursor.execute(query("lock_timeout_reset"))
            return reaped
    except DatabaseError as exc:
        if getattr(exc.__cause__, "pgcode", None) == LOCK_NOT_AVAILABLE:
            raise LockWaitExpired(_message(exc)) from None
        raise


# ---- watermarks (schema/commit.sql) ------------------------------------------------------------


def watermark_merge(*, watermark_type: str, old, new):
    """`old` and `new` merged so the value never decreases (tidemark_merge_watermark), decoded."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("watermark_merge"), {"type": watermark_type, "old": _json(old), "new": _json(new)}
        )
        return json_value(_scalar(cursor))


def watermark_advance(*, watermark_id: int, batch_id: int | None, actor: str, reason: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            query("watermark_advance"),
            {"watermark": watermark_id, "batch": batch_id, "actor": actor, "reason": reason},
        )


def watermark_value_at(*, job_id: int, position: int):
    """The value the job's committed batches below `position` give its watermark, decoded (None:
    none)."""
    with connection.cursor() as cursor:
        cursor.execute(query("watermark_value_at"), {"job": job_id, "position": position})
        row = cursor.fetchone()
    return json_value(row[0]) if row else None


def watermark_position_of_value(*, job_id: int, watermark_type: str, value) -> PositionOfValue:
    with connection.cursor() as cursor:
        cursor.execute(
            query("watermark_position_of_value"),
            {"job": job_id, "type": watermark_type, "value": json.dumps(value)},
        )
        return _read(cursor, PositionOfValue)[0]


def watermark_record(
    *,
    watermark_id: int,
    old_position: int,
    new_position: int,
    old_value,
    new_value,
    source: str,
    batch_id: int | None,
    actor: str,
    reason: str,
    replay: bool,
) -> None:
    """The event and the new watermark, one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("watermark_record"),
            {
                "id": watermark_id,
                "old_position": old_position,
                "new_position": new_position,
                "old_value": _json(old_value),
                "new_value": _json(new_value),
                "source": source,
                "batch": batch_id,
                "actor": actor,
                "reason": reason,
                "replay": replay,
            },
        )


# ---- planning (schema/planning.sql) ------------------------------------------------------------


def plan_items(
    *,
    connector_id: int | None,
    items: str,
    first: int,
    end: int | None,
    budget: int,
    max_items: int,
    limit: int | None,
    source_field: str,
) -> list[PlannedRange]:
    """Batches cut over the items in id order (tidemark_plan_items). In a savepoint: a bad weight
    leaves the caller's transaction usable."""
    params = {
        "connector": connector_id,
        "items": items,
        "first": first,
        "end": end,
        "budget": budget,
        "max_items": max_items,
        "limit": limit,
    }
    with _refusals(source_field=source_field), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(query("plan_batches"), params)
        return _read(cursor, PlannedRange)


def incremental_next(*, job_id: int, items: str) -> IncrementalStart:
    with connection.cursor() as cursor:
        cursor.execute(query("incremental_next"), {"job": job_id, "items": items})
        return _read(cursor, IncrementalStart)[0]


# ---- assets (schema/registration.sql, prefix_sums.sql) -----------------------------------------


def assets_register(
    *,
    connector_id: int,
    locations: Sequence[str],
    weights: Sequence[int],
    extras: Sequence[dict],
) -> list[RegisteredAsset]:
    """The assets added, in id order (tidemark_assets_register; the connector's row stays locked
    until the caller commits)."""
    params = {
        "connector": connector_id,
        "locations": list(locations),
        "weights": list(weights),
        "extras": [json.dumps(extra) for extra in extras],
    }
    with single_call(), connection.cursor() as cursor:
        cursor.execute(query("assets_register"), params)
        return _read(cursor, RegisteredAsset)


def assets_known_size(*, connector_id: int) -> KnownSize:
    """The connector's asset count and last id; (0, 0) without assets. A count no trigger has
    summed yet is counted the slow way. `changed`: whether restatements.changed_unrestated would
    list anything (asked in the same statement)."""
    with connection.cursor() as cursor:
        cursor.execute(query("assets_known_size"), {"connector": connector_id})
        rows = _read(cursor, KnownSize)
        known = rows[0] if rows else KnownSize(0, 0)
        if known.count is None:
            cursor.execute(query("assets_count"), {"connector": connector_id})
            known = KnownSize(_scalar(cursor), known.max_id, known.changed)
    return known


def assets_known_since(
    *, connector_id: int, after: int, upto: int, recheck_seconds: float
) -> list[tuple]:
    """(location, id, weight, mtime_ns, discovered_at epoch) of the assets in (after, upto], the
    last four NULL outside the recheck window. Tuples: discovery reads millions of them."""
    params = {
        "connector": connector_id,
        "after": after,
        "upto": upto,
        "recheck_seconds": recheck_seconds,
    }
    with connection.cursor() as cursor:
        cursor.execute(query("assets_known_since"), params)
        return cursor.fetchall()  # one call into the driver (iterating is a Python loop)


def asset_flag_changed(*, asset_id: int, change: dict) -> bool:
    """Flag the asset as changed after registration, once; whether this call flagged it."""
    with connection.cursor() as cursor:
        cursor.execute(query("asset_flag_changed"), {"change": json.dumps(change), "id": asset_id})
        return bool(cursor.rowcount)


# the SQL types a table connector's column may have, as asset_slices_between casts to them
SLICE_TYPES = {"int": "int8", "timestamptz": "timestamptz", "timestamp": "timestamp"}


def asset_slices_between(
    *, connector_id: int, column_type: str, first, last
) -> tuple[int, int] | None:
    """The first and last id of the connector's slices meeting [first, last], or None."""
    sql = query("asset_slices_between").format(type=SLICE_TYPES[column_type])
    with connection.cursor() as cursor:
        cursor.execute(sql, {"connector": connector_id, "first": first, "last": last})
        low, high = cursor.fetchone()
    return None if low is None else (low, high)


def objects_recent(*, connector_id: int, recheck_seconds: float) -> list[RecentObject]:
    with connection.cursor() as cursor:
        cursor.execute(
            query("objects_recent"), {"connector": connector_id, "recheck_seconds": recheck_seconds}
        )
        return _read(cursor, RecentObject)


def object_flag_changed(
    *,
    asset_id: int,
    size: int,
    etag: str,
    last_modified: str,
    mtime_ns: int | None,
    change: dict,
    old_size: int,
    old_etag: str,
) -> bool:
    """Record an object rewritten under its key, if it still holds `old_etag`; whether it did."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("object_flag_changed"),
            {
                "id": asset_id,
                "size": size,
                "etag": etag,
                "last_modified": last_modified,
                "mtime_ns": mtime_ns,
                "change": json.dumps(change),
                "old_size": old_size,
                "old_etag": old_etag,
            },
        )
        return bool(cursor.rowcount)


# ---- backfills, pacing and the throttle (schema/acquire.sql) -----------------------------------


def urgent_backfill_admissible(*, job_id: int) -> int | None:
    """The job's urgent backfill that may start a batch now (its id), or None."""
    with connection.cursor() as cursor:
        cursor.execute(query("urgent_backfill_admissible"), {"job": job_id})
        return _scalar(cursor)


def backfill_admissible(*, backfill_id: int) -> list[int]:
    """The backfill's batches that may start now, in range order (tidemark_backfill_admissible)."""
    with connection.cursor() as cursor:
        cursor.execute(query("backfill_admissible"), {"backfill": backfill_id})
        return [row[0] for row in cursor.fetchall()]


def throttle_usage() -> dict[int, int]:
    """Connector id -> weight of its backfill batches started within the throttle's window."""
    with connection.cursor() as cursor:
        cursor.execute(query("throttle_usage"))
        return {connector: int(weight) for connector, weight in cursor.fetchall()}


def throttle_admits(*, job_id: int, weights: Sequence[int]) -> int:
    """How many of `weights`, in order, the shared throttle admits now (tidemark_throttle_admits)."""
    with connection.cursor() as cursor:
        cursor.execute(query("throttle_admits"), {"weights": list(weights), "job": job_id})
        return _scalar(cursor)


def batch_seconds(*, job_ids: Sequence[int], status: str, recent: int) -> dict[int, list[float]]:
    """Job id -> the durations (seconds) of its last `recent` batches in `status`."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("batch_seconds"), {"ids": list(job_ids), "status": str(status), "recent": recent}
        )
        return {job: [float(t) for t in took] for job, took in cursor.fetchall()}


# ---- restatements ------------------------------------------------------------------------------


def restatement_replaced_commits(*, batch_id: int) -> list[ReplacedCommits]:
    with connection.cursor() as cursor:
        cursor.execute(query("restatement_replaced_commits"), {"batch": batch_id})
        return _read(cursor, ReplacedCommits)


def restatement_slice_counts(*, counts: Sequence[tuple[int, int]]) -> None:
    """Each (asset id, rows now) recounted table slice takes its row count as its weight."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("restatement_slice_counts"),
            {"ids": [pk for pk, _ in counts], "rows": [rows for _, rows in counts]},
        )


def restatement_files_restated(*, asset_ids: Sequence[int], backfill_ids: Sequence[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            query("restatement_files_restated"),
            {"backfills": json.dumps(list(backfill_ids)), "ids": list(asset_ids)},
        )


# ---- housekeeping ------------------------------------------------------------------------------


def step_claim(*, name: str, gap: float) -> bool:
    """Whether the fixed step `name` may run now (its claim recorded), by the database's clock."""
    with connection.cursor() as cursor:
        cursor.execute(query("step_claim"), {"name": f"{name}:claimed", "gap": gap})
        return cursor.fetchone() is not None


# ---- reads -------------------------------------------------------------------------------------


def jobs_lag(*, job_ids: Sequence[int]) -> list[JobLag]:
    with connection.cursor() as cursor:
        cursor.execute(query("jobs_lag"), {"ids": list(job_ids)})
        return _read(cursor, JobLag)


def jobs_blockers(*, job_ids: Sequence[int] | None) -> list[JobBlocker]:
    with connection.cursor() as cursor:
        cursor.execute(query("jobs_blockers"), {"ids": None if job_ids is None else list(job_ids)})
        return _read(cursor, JobBlocker)


def asset_counts_between(*, connector_id: int, ranges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """lower -> the connector's assets with lower <= id < upper, for each [lower, upper)."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("asset_counts_between"),
            {
                "connector": connector_id,
                "lows": [low for low, _ in ranges],
                "highs": [high for _, high in ranges],
            },
        )
        return dict(cursor.fetchall())


# ---- item sources (inventory/sources/items.py, identity.py) ------------------------------------


def item_rows(*, sql: str, params: Sequence, reads_as: str | None = None) -> list[tuple]:
    """The rows of a read an item source composed (`ItemSource`: its relation and columns checked
    and quoted identifiers, every value a parameter). With `reads_as`, a role with no privilege on
    Tidemark's tables, the read runs as that role (SET LOCAL ROLE in a transaction of its own,
    reset before it ends), so the database refuses what `source_table_check` missed."""
    if reads_as is None:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {reads_as}")  # a constant of items.py, never user text
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        cursor.execute("RESET ROLE")
        return rows


@dataclass(frozen=True)
class RelationReach:
    """A relation as PostgreSQL resolves it, and what a read of it reaches: Tidemark's tables
    (by name or by prefix in their schema), a system catalog, a user-defined function (its name)."""

    schema: str
    name: str
    reads_own: bool
    reads_own_prefix: bool
    reads_system: bool
    calls_function: str | None


def relation_resolve(
    *, relation: str, own: Sequence[str], prefixes: Sequence[str], system: Sequence[str]
) -> RelationReach | None:
    """What a read of `relation` reaches, or None when there is no such relation."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("relation_resolve"),
            {
                "relation": relation,
                "own": list(own),
                "prefixes": list(prefixes),
                "system": list(system),
            },
        )
        rows = _read(cursor, RelationReach)
    return rows[0] if rows else None


def first_expired_commit(*, job_id: int, lower: int, upper: int | None, expired: str) -> int | None:
    """The first commit of job `job_id` in [lower, upper) for which `expired` holds, or None.
    `expired` is a condition on inventory_batch that `job_output._expired_sql` builds from the
    connector's checked retention (numbers and a fixed interval, no user text)."""
    sql = (
        "SELECT min(commit_seq) FROM inventory_batch WHERE job_id = %(job)s "
        f"AND commit_seq IS NOT NULL AND commit_seq >= %(lower)s AND {expired}"
    )
    if upper is not None:
        sql += " AND commit_seq < %(upper)s"
    with connection.cursor() as cursor:
        cursor.execute(sql, {"job": job_id, "lower": lower, "upper": upper})
        return _scalar(cursor)


def own_identity(name: str) -> list[str]:
    """The identity statement `name` of source_table.sql (`server_identity`, `table_identity`)
    run on Tidemark's own database, as text (what a sink's connection is compared with)."""
    with connection.cursor() as cursor:
        cursor.execute(source_query(name))
        return [str(value) for value in cursor.fetchone()]


# ---- the dashboard's and /metrics' reads -------------------------------------------------------


@dataclass(frozen=True)
class LastBatch:
    job_id: int
    id: int
    kind: str
    status: str
    finished_at: Any


@dataclass(frozen=True)
class HourlyRates:
    job_id: int
    hours_ago: int
    succeeded: int
    failed: int
    items: int
    weight: int
    hour_elapsed: float


@dataclass(frozen=True)
class BackfillProgress:
    backfill_id: int
    open: int
    dead: int
    idle: bool


def open_batch_counts() -> dict[tuple[int, str], int]:
    """(job id, status) -> count of its queued, running, failed and dead batches."""
    with connection.cursor() as cursor:
        cursor.execute(query("open_batch_counts"))
        return {(job_id, status): n for job_id, status, n in cursor.fetchall()}


def coverage_batches(*, job_id: int, lower: int, upper: int) -> list[tuple]:
    """(id, status, lower, upper, item_count) of the job's batches meeting [lower, upper)."""
    with connection.cursor() as cursor:
        cursor.execute(query("coverage_batches"), {"job": job_id, "lower": lower, "upper": upper})
        return cursor.fetchall()


def last_batches(*, job_ids: Sequence[int]) -> list[LastBatch]:
    with connection.cursor() as cursor:
        cursor.execute(query("last_batches"), {"ids": list(job_ids)})
        return _read(cursor, LastBatch)


def hourly_rates(*, job_ids: Sequence[int] | None, hours: int) -> list[HourlyRates]:
    """The rates rollup's rows of the last `hours` clock hours, of `job_ids` (None: every job)."""
    ids = None if job_ids is None else list(job_ids)
    with connection.cursor() as cursor:
        cursor.execute(query("hourly_rates"), {"ids": ids, "hours": hours})
        return _read(cursor, HourlyRates)


def stalled_backfills(*, after) -> list[BackfillProgress]:
    """Running backfills: their open and dead batches, and whether nothing finished within
    `after` (a timedelta)."""
    with connection.cursor() as cursor:
        cursor.execute(query("stalled_backfills"), {"after": after})
        return _read(cursor, BackfillProgress)


HEALTH_READS = ("health_read", "health_all", "health_of", "health_metrics")


def health_rows(*, name: str, params: dict) -> list[tuple]:
    """The rows of `name`, one of HEALTH_READS of dashboard.sql: the overview's, alerts' and
    /metrics' reads of `job_health`, the one definition of a job's state (selectors_health.Health
    builds their parameters and reads their rows)."""
    if name not in HEALTH_READS:
        raise ValueError(f"{name!r} is not one of {HEALTH_READS}")
    with connection.cursor() as cursor:
        cursor.execute(dashboard_query(name), params)
        return cursor.fetchall()


def outside_jobs() -> list[int]:
    """The jobs whose lag job_health does not read from prefix sums (counted in their own tables)."""
    with connection.cursor() as cursor:
        cursor.execute(dashboard_query("outside_jobs"))
        return [row[0] for row in cursor.fetchall()]


def waiting_connectors(*, limit: int, offset: int) -> list[tuple]:
    """A page of the connectors waiting for the connector named in their start_after."""
    with connection.cursor() as cursor:
        cursor.execute(dashboard_query("waiting_connectors"), {"limit": limit, "offset": offset})
        return cursor.fetchall()


def waiting_connectors_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute(dashboard_query("waiting_connectors_count"))
        return _scalar(cursor)


# ---- the attempt rollup (inventory/services/metrics_rollup.py) ---------------------------------


def _rollup_boundaries(cursor, rollup: str) -> tuple[int, Any]:
    cursor.execute(query("rollup_boundaries"), {"rollup": rollup})
    row = cursor.fetchone()
    if row is None or row[1] is None:
        return 0, None
    return row[0], row[1]


def attempt_rollup_advance(*, rollup: str, settle_minutes: int, lock_key: int) -> tuple[int, Any]:
    """Move the rollup's boundaries over the attempts settled for `settle_minutes`, counting them,
    in one transaction under the advisory lock `lock_key` (when another roller holds it: nothing
    moves). Returns the boundaries (below_id, finished_before)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(query("rollup_try_lock"), {"key": lock_key})
        if not cursor.fetchone()[0]:
            return _rollup_boundaries(cursor, rollup)
        old_id, old_time = _rollup_boundaries(cursor, rollup)
        if old_time is None:
            # no rollup yet, or one of the old single-boundary kind: count everything afresh
            cursor.execute(query("rollup_clear"))
        cursor.execute(
            query("rollup_next_boundaries"), {"old_id": old_id, "settle": settle_minutes}
        )
        new_id, new_time = cursor.fetchone()
        if old_time is not None and new_time < old_time:
            new_time = old_time  # the database's clock went back: never count a finish twice
        cursor.execute(
            query("rollup_add"),
            {"old_id": old_id, "new_id": new_id, "old_time": old_time, "new_time": new_time},
        )
        cursor.execute(
            query("rollup_record"), {"rollup": rollup, "new_id": new_id, "new_time": new_time}
        )
        return new_id, new_time


def attempt_counts(*, rollup: str) -> list[tuple[int, str, int]]:
    """(job id, outcome, attempts): the rollup plus the attempts at or after its boundaries. The
    rollup and its boundaries are read by one statement (one snapshot: a roller committing in
    between cannot make a segment count twice); the attempts after them by a second, with the
    boundaries as values so that the planner sees how few rows they select."""
    boundaries, counted = query("rollup_boundaries"), query("attempt_counts_rollup")
    with connection.cursor() as cursor:
        cursor.execute(f"WITH boundary AS ({boundaries})\n{counted}", {"rollup": rollup})
        rows = cursor.fetchall()
        bounds = [row[3:] for row in rows if row[0] is None]
        below_id, finished_before = bounds[0] if bounds else (0, None)
        if finished_before is None:  # no rollup (or one of the old kind, which is not read)
            below_id, finished_before = 0, "-infinity"
        counts = {(job, outcome): n for job, outcome, n, *_ in rows if job is not None}
        cursor.execute(
            query("attempt_counts_since"),
            {"below_id": below_id, "finished_before": finished_before},
        )
        for job, outcome, n in cursor.fetchall():
            counts[job, outcome] = counts.get((job, outcome), 0) + n
    return [(job, outcome, n) for (job, outcome), n in counts.items()]


def attempt_totals(*, rollup: str) -> list[tuple[str, int]]:
    """(outcome, attempts) of all jobs, as attempt_counts counts them per job (outcome "": every
    attempt started), summed by the database: a row per outcome, not per job and outcome."""
    boundaries, counted = query("rollup_boundaries"), query("attempt_totals_rollup")
    with connection.cursor() as cursor:
        cursor.execute(f"WITH boundary AS ({boundaries})\n{counted}", {"rollup": rollup})
        rows = cursor.fetchall()
        bounds = [row[3:] for row in rows if row[0]]
        below_id, finished_before = bounds[0] if bounds else (0, None)
        if finished_before is None:  # no rollup (or one of the old kind, which is not read)
            below_id, finished_before = 0, "-infinity"
        totals = {outcome or "": n for boundary, outcome, n, *_ in rows if not boundary}
        cursor.execute(
            query("attempt_totals_since"),
            {"below_id": below_id, "finished_before": finished_before},
        )
        for outcome, n in cursor.fetchall():
            totals[outcome or ""] = totals.get(outcome or "", 0) + n
    return list(totals.items())


# ---- the freshness throttle and the retention forecast ----------------------------------------


def jobs_oldest_waiting(*, job_ids: Sequence[int]) -> dict[int, tuple[int | None, bool]]:
    """Job id -> (seconds its oldest item not committed has waited, None when none waits; whether
    its connector has assets at all), for those of `job_ids` that exist."""
    with connection.cursor() as cursor:
        cursor.execute(query("jobs_oldest_waiting"), {"jobs": list(job_ids)})
        return {job: (age, has_assets) for job, age, has_assets in cursor.fetchall()}


def freshness_step_due(*, interval_seconds: int) -> bool:
    """Whether the throttle's last step is `interval_seconds` old by the database's clock (False
    while the throttle has no row)."""
    with connection.cursor() as cursor:
        cursor.execute(query("freshness_step_due"), {"interval_seconds": interval_seconds})
        return bool(_scalar(cursor))


def statement_time():
    """The database's clock now (statement_timestamp())."""
    with connection.cursor() as cursor:
        cursor.execute(query("statement_time"))
        return _scalar(cursor)


def job_lowest_open_batch(*, job_id: int, statuses: Sequence[str]) -> int | None:
    """The lowest item id of the job's batches in `statuses`, None when it has none."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("job_lowest_open_batch"),
            {"job": job_id, "statuses": [str(status) for status in statuses]},
        )
        return _scalar(cursor)
