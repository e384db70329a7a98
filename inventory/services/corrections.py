"""Audited watermark corrections by an operator (admin or API, always with a reason).

Moving back (a replay, invariant 4's one exception) supersedes the committed batches after the
new position; moving forward covers the items in between with skipped batches. Both go through
the lifecycle. Lock order: job -> watermark -> batches.
"""

from django.db import transaction

from inventory.models import (
    COMMITTED_STATUSES,
    HOLDING_STATUSES,
    OPEN_STATUSES,
    Batch,
    BatchKind,
    BatchStatus,
    Job,
    Watermark,
    WatermarkSource,
    WatermarkType,
)
from inventory.selectors_coverage import source_extent
from inventory.services import lifecycle, watermarks
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.reasons import reason_checked
from inventory.sources.registry import kind_of


@transaction.atomic
def watermark_correct(
    *,
    job: Job,
    value=None,
    position: int | None = None,
    actor: str,
    reason: str,
    replay: bool = False,
    skip_unseen: bool = False,
    source: str = WatermarkSource.API,
) -> Watermark:
    """An audited correction. A reason is always required; moving backwards also needs `replay`.

    For an int watermark the value is the last committed item id (position = value + 1). Moving
    back to an earlier batch boundary supersedes the committed batches after it, so their items
    are planned and processed again (a replay). Moving forward marks the items in between as
    skipped with the correction's reason, so "every item below the watermark is covered" holds.
    Moving forward past the job's last known item is refused unless `skip_unseen` says so: items
    that arrive later with ids in that range would never be processed, and nothing would show
    it; with it, the range past the last item is skipped as such and the gap report lists it
    with the items that arrive in it.
    """
    reason = reason_checked(reason, needed="a watermark correction needs a reason")
    Job.objects.select_for_update().filter(pk=job.pk).first()
    watermark = watermarks.watermark_lock(job.pk)
    wm_type = watermark.type
    if wm_type == WatermarkType.INT:
        if value is None and position is None:
            raise InvalidInput("value", "give the new value (the last committed item id)")
        if value is not None:
            new_value = watermarks.parse_value(wm_type, value)
            field = "value"
        else:
            if isinstance(position, int):
                watermarks.check_bigint(position, "position")
            new_value = watermarks.parse_value(wm_type, position, field="position") - 1
            field = "position"
        new_position = new_value + 1
    else:
        new_position, new_value = _position_and_value(job, watermark, value, position)
        field = "position" if position is not None else "value"
    if new_position < job.start_position:
        raise InvalidInput(
            field,
            f"the job starts at item {job.start_position}; a watermark cannot go below its start",
        )

    backwards = watermarks.decreases(wm_type, watermark.value, new_value)
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
        # a job_output job replays only from a commit its upstream still retains
        kind_of(job.connector).check_replay(job=job, position=new_position)
        _supersede_after(job, new_position, field=field)
    elif new_position > watermark.position:
        known_end = _known_end(job)
        if new_position > known_end and not skip_unseen:
            shown = f"position {new_position}" if field == "position" else f"{new_value!r}"
            last = f"item {known_end - 1}" if known_end > job.start_position else "no item yet"
            raise InvalidInput(
                field,
                f"{shown} is past the job's last known item ({last}): items that arrive later "
                "with ids up to it would never be processed; correct up to the last item, or "
                'give "skip_unseen": true to skip that range on purpose (it is recorded and '
                "shown in the gap report)",
            )
        _skip_up_to(
            job,
            watermark.position,
            new_position,
            reason=reason,
            actor=actor,
            field=field,
            unseen_from=known_end,
        )
    watermarks.watermark_record(
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


def _position_and_value(job: Job, watermark: Watermark, value, position):
    """A non-int watermark's correction in terms its committed batches can vouch for.

    By position: the value is what the committed batches below it reported (a given value must
    agree). By value only: the position is the last committed batch boundary with that value, so
    a replay supersedes exactly what followed it; a value no boundary has is refused.
    """
    wm_type = watermark.type
    given = watermarks.parse_value(wm_type, value)
    if position is not None:
        if isinstance(position, bool) or not isinstance(position, int):
            raise InvalidInput("position", "must be an integer item id")
        watermarks.check_bigint(position, "position")
        computed = watermarks.value_at(job.pk, position)
        if position > watermark.position:  # forward: skipped items report nothing
            computed = watermarks.merge_values(wm_type, watermark.value, computed)
        if value is not None and watermarks.decreases(wm_type, given, computed) + (
            watermarks.decreases(wm_type, computed, given)
        ):
            raise InvalidInput(
                "value",
                f"at position {position} the committed batches give {computed!r}, not "
                f"{given!r}; leave value out to take theirs",
            )
        return position, computed
    if given is None:
        raise InvalidInput("value", "give the new value, or a position (an item id boundary)")
    found = watermarks.position_of_value(job.pk, wm_type, given)
    if found["exact"] is not None:
        return found["exact"], watermarks.value_at(job.pk, found["exact"])
    nearest = [
        f"position {found[side]} has {found[side + '_value']!r}"
        for side in ("below", "above")
        if found[side] is not None
    ]
    raise InvalidInput(
        "value",
        f"no committed batch boundary of this job has the value {given!r}, so no position "
        "corresponds to it"
        + (f" (nearest: {'; '.join(nearest)})" if nearest else "")
        + "; give a position instead",
    )


def _inside(field: str, position: int, batch: Batch, *, what: str, output: bool = False) -> str:
    """`position` lies inside `batch`: the boundaries to give instead, in the terms of the field
    the correction was given by (item ids for a position, last committed ids for a value)."""
    span = batch.span
    where = f"the output of batch {batch.pk}" if output else f"batch {batch.pk}"
    if field == "position":
        return (
            f"position {position} is inside {where} {span}; {what}: position {span.lower} or "
            f"{span.upper}"
        )
    return f"{position - 1} is inside {where} {span}; {what}: {span.lower - 1} or {span.upper - 1}"


def _supersede_after(job: Job, position: int, *, field: str = "value") -> None:
    incremental = Batch.objects.filter(job=job, kind=BatchKind.INCREMENTAL)
    straddling = incremental.filter(status__in=HOLDING_STATUSES, span__contains=position).exclude(
        span__startswith=position
    )
    if straddling.exists():
        batch = straddling.first()
        raise InvalidInput(
            field,
            _inside(field, position, batch, what="replay from a batch boundary"),
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
            field,
            _inside(field, position, inside, what="replay from a boundary of it", output=True),
        )
    in_flight = incremental.filter(
        status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING], span__startswith__gte=position
    ) | Batch.objects.filter(  # a backfill batch would publish into the replayed range
        job=job,
        kind=BatchKind.BACKFILL,
        status__in=OPEN_STATUSES,
        span__endswith__gt=position,
    )
    if in_flight.exists():
        raise Conflict(
            f"batch {in_flight.first().pk} is still in flight after that point; cancel it or wait"
        )
    lifecycle.batches_supersede(
        incremental.filter(status__in=HOLDING_STATUSES, span__startswith__gte=position)
    )


def _known_end(job: Job) -> int:
    """One past the job's last known item (its start position when it has none)."""
    extent = source_extent(job)
    return extent[1] if extent else job.start_position


def _skip_up_to(
    job: Job,
    position: int,
    new_position: int,
    *,
    reason: str,
    actor: str,
    field: str = "value",
    unseen_from: int | None = None,
) -> None:
    """Cover [position, new_position) with skipped batches where no batch holds the ids yet;
    ids from `unseen_from` on (past the last known item) get a batch of their own saying so."""
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
            raise InvalidInput(field, _inside(field, new_position, batch, what="use"))
        if batch.span.lower > cursor:
            _skipped_batch(job, cursor, batch.span.lower, reason=reason, actor=actor)
        cursor = batch.span.upper
    if cursor < new_position:
        unseen = new_position if unseen_from is None else unseen_from
        seen_end = max(min(unseen, new_position), cursor)
        if cursor < seen_end:
            _skipped_batch(job, cursor, seen_end, reason=reason, actor=actor)
        if seen_end < new_position:
            _skipped_batch(job, seen_end, new_position, reason=reason, actor=actor, unseen=True)


def _skipped_batch(
    job: Job, lower: int, upper: int, *, reason: str, actor: str, unseen: bool = False
) -> None:
    what = (
        f"ids {lower}-{upper - 1} skipped before any item had them (skip_unseen)" if unseen else ""
    )
    lifecycle.batch_insert_skipped(
        job=job,
        lower=lower,
        upper=upper,
        reason=f"watermark correction by {actor or 'unknown'}: {what + '; ' if what else ''}{reason}",
    )
