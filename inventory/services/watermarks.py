"""Watermarks: the contiguous committed prefix of a job and its typed values.

Corrections by an operator (which supersede or skip batches) are in corrections.py.

Lock order everywhere: job row -> watermark row -> batch rows. Keeping one order means a commit, a
correction and a skip can never deadlock each other.
"""

from dataclasses import asdict
from datetime import datetime

from inventory.bounds import BIGINT
from inventory.models import (
    Batch,
    Job,
    Watermark,
    WatermarkType,
)
from inventory.services.errors import InvalidInput
from inventory.services.instants import instant_checked
from inventory.sql import gateway

# ---- pure value rules --------------------------------------------------------------------------


def parse_value(watermark_type: str, value, *, field: str = "value"):
    """Validate a watermark value of the given type and return its canonical JSON form."""
    if value is None:
        return None
    if watermark_type == WatermarkType.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(field, f"an int watermark needs an integer, got {value!r}")
        # its position (value + 1) is a bigint too: the value's own range is one less at the top
        if not BIGINT_MIN <= value <= BIGINT_MAX - 1:
            raise InvalidInput(field, f"{value} is out of range ({BIGINT_MIN} to {BIGINT_MAX - 1})")
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
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            raise InvalidInput(field, f"{value!r} has no time zone; add one, e.g. +00:00")
        return instant_checked(parsed, field=field, given=value).isoformat()
    if watermark_type == WatermarkType.KEY_VALUE:
        if not isinstance(value, dict):
            raise InvalidInput(field, "a key_value watermark needs an object of key -> integer")
        for key, offset in value.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise InvalidInput(f"{field}.{key}", f"expected an integer, got {offset!r}")
            check_bigint(offset, f"{field}.{key}")
        return {str(k): v for k, v in value.items()}
    if watermark_type == WatermarkType.FILE_SET:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(field, "a file_set watermark needs a list of file names")
        return sorted(set(value))
    raise InvalidInput("type", f"unknown watermark type {watermark_type!r}")


BIGINT_MIN, BIGINT_MAX = -BIGINT - 1, BIGINT  # a bigint column's range (inventory.bounds)


def check_bigint(number: int, field: str) -> None:
    """Item ids, positions and offsets are PostgreSQL bigints: a 400 naming the field beyond."""
    if not BIGINT_MIN <= number <= BIGINT_MAX:
        raise InvalidInput(field, f"{number} is out of range ({BIGINT_MIN} to {BIGINT_MAX})")


def merge_values(watermark_type: str, old, new):
    """Combine a stored value with an update so the result never decreases (invariant 4).

    datetime: the later instant; key_value: per-key maximum, keys missing from the update kept;
    file_set: the union; int: the larger one. The rule lives in the database
    (tidemark_merge_watermark, inventory/sql/schema/commit.sql), where commits apply it; this asks it.
    """
    return gateway.watermark_merge(watermark_type=watermark_type, old=old, new=new)


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


def value_at(job_id: int, position: int):
    """What a job's committed incremental batches below `position` report, merged in span order
    (None at the job's start or before any report)."""
    return gateway.watermark_value_at(job_id=job_id, position=position)


def position_of_value(job_id: int, watermark_type: str, value) -> dict:
    """The last committed boundary where the watermark has `value` (`exact`), else the nearest
    boundaries below and above it (datetime) with their values."""
    found = gateway.watermark_position_of_value(
        job_id=job_id, watermark_type=watermark_type, value=value
    )
    return asdict(found)


# ---- writes ------------------------------------------------------------------------------------


def watermark_create(*, job: Job) -> Watermark:
    return Watermark.objects.create(
        job=job, type=job.watermark_type, position=job.start_position, value=None
    )


def watermark_lock(job_id: int) -> Watermark:
    return Watermark.objects.select_for_update().get(job_id=job_id)


def watermark_advance(
    *, watermark: Watermark, trigger: Batch | None = None, actor: str | None = None, reason=""
) -> Watermark:
    """Move the watermark over the gap-free run of committed batches that starts at its position
    (tidemark_advance, inventory/sql/schema/commit.sql), recording one event when it moves.

    Must run inside the transaction holding the watermark's row lock (see watermark_lock).
    `actor`/`reason` name an operator who caused the move (a skip); else the batch's worker.
    """
    gateway.watermark_advance(
        watermark_id=watermark.pk,
        batch_id=trigger.pk if trigger else None,
        actor=actor if actor is not None else (trigger.worker if trigger else ""),
        reason=reason or "",
    )
    watermark.refresh_from_db(fields=["position", "value"])
    return watermark


def watermark_record(
    watermark: Watermark, *, new_position, new_value, source, batch, actor, reason, replay=False
):
    """Write the event and the new watermark in one statement (this runs on every commit)."""
    gateway.watermark_record(
        watermark_id=watermark.pk,
        old_position=watermark.position,
        new_position=new_position,
        old_value=watermark.value,
        new_value=new_value,
        source=source,
        batch_id=batch.pk if batch else None,
        actor=actor or "",
        reason=reason or "",
        replay=replay,
    )
    watermark.position = new_position
    watermark.value = new_value
