"""Watermarks: the contiguous committed prefix of a job, typed values, audited corrections.

Lock order everywhere: job row -> watermark row -> batch rows. Keeping one order means a commit, a
correction and a skip can never deadlock each other.
"""

import json
from datetime import datetime

from django.db import connection, transaction

from inventory.models import (
    COMMITTED_STATUSES,
    HOLDING_STATUSES,
    Batch,
    BatchKind,
    BatchStatus,
    Job,
    Watermark,
    WatermarkSource,
    WatermarkType,
)
from inventory.services.errors import Conflict, InvalidInput
from inventory.sql import query

# ---- pure value rules --------------------------------------------------------------------------


def parse_value(watermark_type: str, value, *, field: str = "value"):
    """Validate a watermark value of the given type and return its canonical JSON form."""
    if value is None:
        return None
    if watermark_type == WatermarkType.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(field, f"an int watermark needs an integer, got {value!r}")
        return value
    if watermark_type == WatermarkType.DATETIME:
        if not isinstance(value, str):
            raise InvalidInput(
                field, f"a datetime watermark needs an ISO 8601 string, got {value!r}"
            )
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(field, f"{value!r} is not an ISO 8601 datetime") from None
        if parsed.tzinfo is None:
            raise InvalidInput(field, f"{value!r} has no time zone; add one, e.g. +00:00")
        return parsed.isoformat()
    if watermark_type == WatermarkType.KEY_VALUE:
        if not isinstance(value, dict):
            raise InvalidInput(field, "a key_value watermark needs an object of key -> integer")
        for key, offset in value.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise InvalidInput(f"{field}.{key}", f"expected an integer, got {offset!r}")
        return {str(k): v for k, v in value.items()}
    if watermark_type == WatermarkType.FILE_SET:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(field, "a file_set watermark needs a list of file names")
        return sorted(set(value))
    raise InvalidInput("type", f"unknown watermark type {watermark_type!r}")


def merge_values(watermark_type: str, old, new):
    """Combine a stored value with an update so the result never decreases (invariant 4).

    datetime: the later instant; key_value: per-key maximum, keys missing from the update kept;
    file_set: the union; int: the larger one. The rule lives in the database
    (tidemark_merge_watermark, migration 0004), where commits apply it; this asks it.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            query("watermark_merge"),
            [watermark_type, _json_or_null(old), _json_or_null(new)],
        )
        merged = cursor.fetchone()[0]
    return json.loads(merged) if isinstance(merged, str) else merged


def decreases(watermark_type: str, old, new) -> list[str]:
    """What in `new` would move the watermark backwards from `old`; empty when nothing does."""
    if old is None:
        return []
    if new is None:
        return ["the value would be cleared"]
    if watermark_type == WatermarkType.DATETIME:
        if datetime.fromisoformat(new) < datetime.fromisoformat(old):
            return [f"{new} is before {old}"]
        return []
    if watermark_type == WatermarkType.KEY_VALUE:
        return [
            f"{key}: {new[key] if key in new else 'removed'} < {offset}"
            for key, offset in old.items()
            if key not in new or new[key] < offset
        ]
    if watermark_type == WatermarkType.FILE_SET:
        return [f"{name} removed" for name in sorted(set(old) - set(new))]
    return [f"{new} < {old}"] if new < old else []


# ---- writes ------------------------------------------------------------------------------------


def watermark_create(*, job: Job) -> Watermark:
    return Watermark.objects.create(
        job=job, type=job.watermark_type, position=job.start_position, value=None
    )


def _lock_watermark(job_id: int) -> Watermark:
    return Watermark.objects.select_for_update().get(job_id=job_id)


def watermark_advance(
    *, watermark: Watermark, trigger: Batch | None = None, actor: str | None = None, reason=""
) -> Watermark:
    """Move the watermark over the gap-free run of committed batches that starts at its position
    (tidemark_advance, migration 0004), recording one event when it moves.

    Must run inside the transaction holding the watermark's row lock (see _lock_watermark).
    `actor`/`reason` name an operator who caused the move (a skip); else the batch's worker.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            query("watermark_advance"),
            [
                watermark.pk,
                trigger.pk if trigger else None,
                actor if actor is not None else (trigger.worker if trigger else ""),
                reason or "",
            ],
        )
    watermark.refresh_from_db(fields=["position", "value"])
    return watermark


def _record(
    watermark: Watermark, *, new_position, new_value, source, batch, actor, reason, replay=False
):
    """Write the event and the new watermark in one statement (this runs on every commit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("watermark_record"),
            {
                "id": watermark.pk,
                "old_position": watermark.position,
                "new_position": new_position,
                "old_value": _json_or_null(watermark.value),
                "new_value": _json_or_null(new_value),
                "source": source,
                "batch": batch.pk if batch else None,
                "actor": actor or "",
                "reason": reason or "",
                "replay": replay,
            },
        )
    watermark.position = new_position
    watermark.value = new_value


def _json_or_null(value):
    return None if value is None else json.dumps(value)


@transaction.atomic
def watermark_correct(
    *,
    job: Job,
    value=None,
    position: int | None = None,
    actor: str,
    reason: str,
    replay: bool = False,
    source: str = WatermarkSource.API,
) -> Watermark:
    """An audited correction. A reason is always required; moving backwards also needs `replay`.

    For an int watermark the value is the last committed item id (position = value + 1). Moving
    back to an earlier batch boundary supersedes the committed batches after it, so their items
    are planned and processed again (a replay). Moving forward marks the items in between as
    skipped with the correction's reason, so "every item below the watermark is covered" holds.
    """
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("reason", "a watermark correction needs a reason")
    Job.objects.select_for_update().filter(pk=job.pk).first()
    watermark = _lock_watermark(job.pk)
    wm_type = watermark.type
    if wm_type == WatermarkType.INT:
        if value is None and position is None:
            raise InvalidInput("value", "give the new value (the last committed item id)")
        if value is not None:
            new_value = parse_value(wm_type, value)
        else:
            new_value = parse_value(wm_type, position, field="position") - 1
        new_position = new_value + 1
    else:
        new_value = parse_value(wm_type, value)
        new_position = watermark.position if position is None else position
        if isinstance(new_position, bool) or not isinstance(new_position, int):
            raise InvalidInput("position", "must be an integer item id")

    backwards = decreases(wm_type, watermark.value, new_value)
    if new_position < watermark.position:
        backwards.append(f"position {new_position} < {watermark.position}")
    if backwards and not replay:
        raise InvalidInput(
            "replay",
            "this correction moves the watermark backwards ("
            + "; ".join(backwards)
            + "); confirm it as a replay",
        )
    if new_position < watermark.position:
        _supersede_after(job, new_position)
    elif new_position > watermark.position:
        _skip_up_to(job, watermark.position, new_position, reason=reason, actor=actor)
    _record(
        watermark,
        new_position=new_position,
        new_value=new_value,
        source=source,
        batch=None,
        actor=actor,
        reason=reason,
        replay=bool(backwards),
    )
    return watermark


def _supersede_after(job: Job, position: int) -> None:
    incremental = Batch.objects.filter(job=job, kind=BatchKind.INCREMENTAL)
    straddling = incremental.filter(status__in=HOLDING_STATUSES, span__contains=position).exclude(
        span__startswith=position
    )
    if straddling.exists():
        batch = straddling.first()
        raise InvalidInput(
            "value",
            f"{position - 1} is inside batch {batch.pk} {batch.span}; replay from a batch boundary: "
            f"{batch.span.lower - 1} or {batch.span.upper - 1}",
        )
    # a replay rewrites outputs in the sink whole: it may not start inside one (docs/guarantees.md)
    inside = (
        Batch.objects.filter(
            job=job,
            published_attempt__isnull=False,
            replaced_by__isnull=True,
            span__contains=position,
        )
        .exclude(span__startswith=position)
        .first()
    )
    if inside is not None:
        raise InvalidInput(
            "value",
            f"{position - 1} is inside the output of batch {inside.pk} {inside.span}; replay from "
            f"a boundary of it: {inside.span.lower - 1} or {inside.span.upper - 1}",
        )
    in_flight = incremental.filter(
        status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING], span__startswith__gte=position
    ) | Batch.objects.filter(  # a backfill batch would publish into the replayed range
        job=job,
        kind=BatchKind.BACKFILL,
        status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED],
        span__endswith__gt=position,
    )
    if in_flight.exists():
        raise Conflict(
            f"batch {in_flight.first().pk} is still in flight after that point; cancel it or wait"
        )
    incremental.filter(status__in=HOLDING_STATUSES, span__startswith__gte=position).update(
        status=BatchStatus.SUPERSEDED
    )


def _skip_up_to(job: Job, position: int, new_position: int, *, reason: str, actor: str) -> None:
    """Cover [position, new_position) with skipped batches where no batch holds the ids yet."""
    held = Batch.objects.filter(
        job=job,
        kind=BatchKind.INCREMENTAL,
        status__in=HOLDING_STATUSES,
        span__overlap=(position, new_position),
    ).order_by("span")
    cursor = position
    for batch in held:
        if batch.status not in COMMITTED_STATUSES:
            raise Conflict(
                f"batch {batch.pk} ({batch.status}) lies in the skipped range; "
                "skip, cancel or finish it first"
            )
        if batch.span.upper > new_position:
            raise InvalidInput(
                "value",
                f"{new_position - 1} is inside batch {batch.pk} {batch.span}; "
                f"use {batch.span.lower - 1} or {batch.span.upper - 1}",
            )
        if batch.span.lower > cursor:
            _skipped_batch(job, cursor, batch.span.lower, reason=reason, actor=actor)
        cursor = batch.span.upper
    if cursor < new_position:
        _skipped_batch(job, cursor, new_position, reason=reason, actor=actor)


def _skipped_batch(job: Job, lower: int, upper: int, *, reason: str, actor: str) -> None:
    Batch.objects.create(
        job=job,
        kind=BatchKind.INCREMENTAL,
        status=BatchStatus.SKIPPED,
        span=(lower, upper),
        item_count=0,
        weight=0,
        max_attempts=job.max_attempts,
        skip_reason=f"watermark correction by {actor or 'unknown'}: {reason}",
    )
