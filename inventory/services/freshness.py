"""The freshness-driven backfill throttle: the controller's step, a person's pin and the settings.

Every job shares the Celery workers (one queue), so every running backfill competes with every
live job. The step (beat's backfill pacing, backfills_pace_step: at most once per
`interval_seconds`) reads how much of its freshness target each live job uses and how fast the
backfills go, asks the rule
(freshness_control.decide) for the next rate and concurrency cap, and writes them to the one
FreshnessThrottle row, which acquire's SQL applies (tidemark_freshness_rate,
tidemark_freshness_concurrency in acquire.sql). A step that changes the limit, and every pin,
leaves a ThrottleDecision with its reason and the jobs missing their target.

The observation is read before the row is locked: acquire takes that row while it limits, and the
reads (a lag probe per targeted job) must not hold it up.
"""

import math

from django.db import transaction
from django.db.models import DurationField, ExpressionWrapper, Max, Min, Sum
from django.db.models.functions import Now
from django.utils import timezone

from inventory.models import Backfill, BackfillStatus, FreshnessThrottle, ThrottleDecision
from inventory.selectors_freshness import jobs_freshness
from inventory.services import dispatch
from inventory.services.errors import InvalidInput
from inventory.services.freshness_control import (
    ControlSettings,
    ControlState,
    Decision,
    Observation,
    decide,
)
from inventory.services.throttle import throttle_usage
from inventory.sql import gateway


def _effective(row: FreshnessThrottle) -> ControlState:
    """The limit acquire applies (tidemark_freshness_rate, tidemark_freshness_concurrency)."""
    if row.pinned_rate is not None:
        return ControlState(rate=row.pinned_rate)
    if not row.enabled:
        return ControlState()
    return ControlState(rate=row.rate, concurrency=row.concurrency)


def _row_locked() -> FreshnessThrottle:
    FreshnessThrottle.objects.get_or_create(id=1)
    return FreshnessThrottle.objects.select_for_update().get(id=1)


def _settings(row: FreshnessThrottle) -> ControlSettings:
    return ControlSettings(
        increase_fraction=row.increase_fraction,
        decrease_factor=row.decrease_factor,
        floor_fraction=row.floor_fraction,
        slow_above=row.slow_above,
        speed_below=row.speed_below,
    )


def _state(row: FreshnessThrottle) -> ControlState:
    return ControlState(
        rate=row.rate, concurrency=row.concurrency, reference_rate=row.reference_rate
    )


def freshness_observe(*, pinned_rate: int | None = None) -> Observation:
    """What the controller sees now: the live jobs missing their target, the running backfills,
    the weight they started within the throttle window."""
    load = tuple((row.name, row.used) for row in jobs_freshness() if row.used is not None)
    running = Backfill.objects.filter(status=BackfillStatus.RUNNING).aggregate(
        most=Max("max_concurrency"),
        weight=Sum("batch_weight"),
        # by the database's clock, as the window's weight is (a web or beat host's clock may
        # be off by more than the window)
        age=ExpressionWrapper(Now() - Min("created_at"), output_field=DurationField()),
    )
    count = Backfill.objects.filter(status=BackfillStatus.RUNNING).count()
    return Observation(
        load=load,
        backfills=count,
        backfill_rate=_per_window(throttle_usage()[None], age=running["age"]),
        backfill_concurrency=running["most"] or 1,
        floor_weight=int(running["weight"] or 1),
        pinned_rate=pinned_rate,
    )


# the throttle's window (acquire.sql: tidemark_throttle_window) and the shortest stretch of it a
# pace is read from (a backfill's first seconds start a batch or two: no pace yet)
WINDOW_SECONDS = 60
SHORTEST_SECONDS = 10


def _per_window(weight: int, *, age) -> int:
    """The weight the backfills start in a whole window at their pace: what they started in the
    window, scaled up when the oldest running backfill began less than a window ago (read at
    its 29th second the window holds half a minute of work; taken as a minute's, the controller's
    first cut starts from half the real pace and its increases are half as large)."""
    if age is None:
        return weight
    elapsed = age.total_seconds()
    if elapsed >= WINDOW_SECONDS:
        return weight
    return round(weight * WINDOW_SECONDS / max(elapsed, SHORTEST_SECONDS))


def _due(interval_seconds: int) -> bool:
    """Whether the last step is `interval_seconds` old by the database's clock."""
    return gateway.freshness_step_due(interval_seconds=interval_seconds)


def _record(old: ControlState, new: ControlState, reason: str, missing) -> ThrottleDecision:
    return ThrottleDecision.objects.create(
        old_rate=old.rate,
        new_rate=new.rate,
        old_concurrency=old.concurrency,
        new_concurrency=new.concurrency,
        reason=reason,
        missing=list(missing),
    )


def throttle_control_step(*, force: bool = False) -> Decision | None:
    """One step of the controller (a beat step, from backfill pacing); None when the last step is
    younger than the row's `interval_seconds` (unless `force`), or the controller is off."""
    row = FreshnessThrottle.objects.filter(id=1).first()
    if row is not None and not row.enabled and row.pinned_rate is None:
        return None
    if row is not None and not force and not _due(row.interval_seconds):
        return None  # read unlocked first: most pacing steps end here, having observed nothing
    pinned = row.pinned_rate if row else None
    observed = freshness_observe(pinned_rate=pinned)
    with transaction.atomic():
        row = _row_locked()
        if not force and not _due(row.interval_seconds):
            return None  # another step went first
        if row.pinned_rate != pinned or (not row.enabled and row.pinned_rate is None):
            return None  # a pin or the settings changed meanwhile: their own record says so
        old = _state(row)
        decision = decide(state=old, observed=observed, settings=_settings(row))
        row.rate = decision.state.rate
        row.concurrency = decision.state.concurrency
        row.reference_rate = decision.state.reference_rate
        row.stepped_at = _db_now()
        row.save()
        if decision.changed:
            _record(old, decision.state, decision.reason, observed.missing)
    return decision


def backfills_pace_step() -> dict[int, list[int]]:
    """Beat's backfill pacing step: the controller first (at most once per its interval), so the
    batches dispatch.backfills_pace then nudges are those its new limit admits."""
    throttle_control_step()
    return dispatch.backfills_pace()


def _db_now():
    return gateway.statement_time()


def _positive_rate(value, field: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(field, f"must be a positive integer (weight per minute), got {value!r}")


def throttle_pin(*, rate: int | None, actor: str = "") -> FreshnessThrottle:
    """Pin the backfills' rate (weight per minute) to `rate`, overriding the controller, or with
    None remove the pin so the controller decides again. Recorded as a decision."""
    _positive_rate(rate, "pinned_rate")
    who = actor or "a person"
    with transaction.atomic():
        row = _row_locked()
        if row.pinned_rate == rate:
            return row
        old = _effective(row)
        row.pinned_rate = rate
        row.pinned_by = actor if rate is not None else ""
        row.pinned_at = timezone.now() if rate is not None else None
        if rate is not None:
            reason = f"pinned at {rate}/min by {who}"
        else:
            reason = f"pin removed by {who}: the controller decides again from its next step"
            row.stepped_at = None  # the next pacing step decides at once
        row.save()
        new = _effective(row)
        _record(old, new, reason, ())
    return row


SETTINGS_FIELDS = (
    "enabled",
    "increase_fraction",
    "decrease_factor",
    "floor_fraction",
    "slow_above",
    "speed_below",
    "interval_seconds",
)


def throttle_control_configure(*, actor: str = "", **changes) -> FreshnessThrottle:
    """Change the controller's settings (SETTINGS_FIELDS); each refused value names its field.
    Turning it off lifts its limit at once (a pin stays); both moves are recorded."""
    unknown = set(changes) - set(SETTINGS_FIELDS)
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a setting of the freshness controller")
    if "enabled" in changes and not isinstance(changes["enabled"], bool):
        raise InvalidInput("enabled", "must be true or false")
    bounds = {
        "increase_fraction": (0, 1 + 1e-12, "must be above 0 and at most 1"),
        "decrease_factor": (0, 1, "must be between 0 and 1 (both excluded)"),
        "floor_fraction": (-1e-12, 1, "must be at least 0 and below 1"),
        "slow_above": (0, 1 + 1e-12, "must be above 0 and at most 1"),
        "speed_below": (0, 1 + 1e-12, "must be above 0 and at most 1"),
    }
    for field, (low, high, says) in bounds.items():
        if field not in changes:
            continue
        value = changes[field]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(field, f"must be a number, got {value!r}")
        # NaN passes every comparison below as false: refused first, infinities with it
        if not math.isfinite(value):
            raise InvalidInput(field, f"must be a finite number, got {value!r}")
        if value <= low or (high is not None and value >= high):
            raise InvalidInput(field, f"{says}, got {value!r}")
    if "interval_seconds" in changes:
        value = changes["interval_seconds"]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInput("interval_seconds", f"must be a positive integer, got {value!r}")
    with transaction.atomic():
        row = _row_locked()
        before, was_enabled = _effective(row), row.enabled
        for field, value in changes.items():
            setattr(row, field, value)
        if was_enabled and not row.enabled:
            row.rate = row.concurrency = None
        if row.speed_below > row.slow_above:
            field = "speed_below" if "speed_below" in changes else "slow_above"
            raise InvalidInput(
                field,
                f"speed_below ({row.speed_below}) must not be above slow_above ({row.slow_above})",
            )
        row.save()
        if was_enabled != row.enabled:
            who = actor or "a person"
            turned = "on" if row.enabled else "off: its limit lifted"
            _record(before, _effective(row), f"controller turned {turned} by {who}", ())
    return row
