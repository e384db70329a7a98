"""What every part of the batch lifecycle uses: the one call that moves batches
(`batches_transition`, SQL tidemark_batch_transition), "due", "blocked", the row locks and fences."""

import json

from django.db import DatabaseError, connection
from django.db.models import BooleanField, F, Func
from django.db.models.functions import Now

from inventory.models import Backfill, Batch, Connector, Job
from inventory.services import secrets
from inventory.services.errors import Conflict, NotFound, StaleAttempt
from inventory.services.transactions import single_call
from inventory.sql import query

# a move not in tidemark_batch_move / tidemark_backfill_move (inventory/sql/schema/transitions.sql)
MOVE_REFUSED = "TM400"


def config_snapshot(job: Job) -> dict:
    return {
        "processor": job.processor,
        "params": job.params,
        "sink": job.sink,
        "batch_weight": job.batch_weight,
        "max_items": job.max_items,
        "watermark_type": job.watermark_type,
        "executor": job.executor,
    }


def batch_due() -> Func:
    """True for a batch that may start now: queued with no backoff pending, or failed with its
    backoff over, by the database's clock. The one definition, shared with the SQL functions
    (tidemark_batch_due in inventory/sql/schema/statuses.sql): `Batch.objects.filter(batch_due())`."""
    return Func(
        F("status"),
        F("next_attempt_at"),
        function="tidemark_batch_due",
        output_field=BooleanField(),
    )


def job_blocked_reason(job: Job) -> str | None:
    """Why the job may not take new work now (paused, its connector not active), or None when it
    may. The one definition is SQL's (tidemark_job_blocked), which acquire refuses with too."""
    with connection.cursor() as cursor:
        cursor.execute(query("job_blocked"), [job.pk])
        row = cursor.fetchone()
    return row[0] if row else None


def batches_transition(
    ids,
    *,
    from_statuses,
    to: str,
    worker: str | None = None,
    lease_seconds: int | None = None,
    error: dict | None = None,
    skip_reason: str | None = None,
    more_attempts: int | None = None,
) -> list[Batch]:
    """Move the batches `ids` that are in one of `from_statuses` to `to`, with what that move
    writes besides (tidemark_batch_transition); the others stay. Returns the moved batches. A move
    not in the move table is refused (a bug, not an operator's mistake: Conflict)."""
    params = {
        "ids": list(ids),
        "from": [str(status) for status in from_statuses],
        "to": str(to),
        "worker": worker,
        "lease": lease_seconds,
        "error": None if error is None else json.dumps(error),
        "skip_reason": skip_reason,
        "more_attempts": more_attempts,
    }
    try:
        with single_call():
            return list(Batch.objects.raw(query("batch_transition"), params))
    except DatabaseError as exc:
        if getattr(exc.__cause__, "pgcode", None) == MOVE_REFUSED:
            raise Conflict(str(exc).strip().splitlines()[0]) from None
        raise


def batch_fetch(sql: str, params) -> Batch | None:
    """The first batch row that `sql` (a SQL function returning inventory_batch rows) returns, as
    a Batch, or None: what `Batch.objects.raw(...)` gives for that row, for the single-batch calls
    (plan, acquire, succeed). The raw queryset works out the column-to-field mapping and the converters on every
    call, which cost the Python side of a call about as much as the rest of it; here they are
    worked out once per column list."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        columns = tuple(column[0] for column in cursor.description)
    order, converters = _batch_reader(columns)
    values = [row[index] for index in order]
    for index, functions, expression in converters:
        for function in functions:
            values[index] = function(values[index], expression, connection)
    return Batch.from_db(connection.alias, None, values)


# column list -> (for each concrete field of Batch, in model order, the index of its column;
# the converters to apply, by field index), as Model.from_db takes values in field order
_BATCH_READERS: dict[tuple[str, ...], tuple[list[int], list]] = {}


def _batch_reader(columns: tuple[str, ...]) -> tuple[list[int], list]:
    reader = _BATCH_READERS.get(columns)
    if reader is None:
        fields = Batch._meta.concrete_fields
        position = {column: index for index, column in enumerate(columns)}
        if len(columns) != len(fields) or any(f.column not in position for f in fields):
            raise ValueError(f"not a batch row: {columns}")
        converters = []
        for index, field in enumerate(fields):
            expression = field.get_col(Batch._meta.db_table)
            functions = connection.ops.get_db_converters(expression) + expression.get_db_converters(
                connection
            )
            if functions:
                converters.append((index, functions, expression))
        reader = ([position[field.column] for field in fields], converters)
        _BATCH_READERS[columns] = reader
    return reader


def redacted(batch: Batch, error: dict) -> dict:
    """An error as stored: without the values of the environment variables the job names
    (a DSN echoed in an exception), nor any other credential (inventory.services.secrets)."""
    connector_config = (
        Connector.objects.filter(pk=batch.job.connector_id).values_list("config", flat=True).first()
    )
    names = secrets.env_names(batch.job.params, batch.job.sink, connector_config)
    return secrets.redact(error, names=names)


def locked(batch_id: int) -> Batch:
    batch = (
        Batch.objects.select_for_update(of=("self",))
        .select_related("job")
        .annotate(db_now=Now())
        .filter(pk=batch_id)
        .first()
    )
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    return batch


def fence(batch: Batch, attempt: int, *, require_lease: bool) -> None:
    if batch.status != "running":
        raise StaleAttempt(f"batch {batch.pk} is {batch.status}, not running")
    if batch.attempt != attempt:
        raise StaleAttempt(
            f"batch {batch.pk} is on attempt {batch.attempt}; attempt {attempt} may not report"
        )
    # the database's clock, as leases are written with it (see locked)
    if require_lease and batch.lease_expires_at <= batch.db_now:
        raise StaleAttempt(
            f"batch {batch.pk} attempt {attempt}: lease expired at "
            f"{batch.lease_expires_at.isoformat()}"
        )


def complete_backfill_if_done(backfill_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(query("backfill_complete_if_done"), [backfill_id])


def backfills_transition(ids, *, from_statuses, to: str) -> list[Backfill]:
    """Move the backfills `ids` that are in one of `from_statuses` to `to` (the one call that
    writes a backfill's status after its birth: tidemark_backfill_transition, which refuses a move
    not in tidemark_backfill_move). The caller holds their rows. Returns the moved ones."""
    moved = []
    with connection.cursor() as cursor:
        for backfill_id in ids:
            cursor.execute(
                query("backfill_transition"),
                [backfill_id, [str(s) for s in from_statuses], str(to)],
            )
            moved += [row[0] for row in cursor.fetchall()]
    return list(Backfill.objects.filter(pk__in=moved).order_by("pk"))
