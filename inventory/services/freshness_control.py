"""The freshness controller's rule, without Django: given what the last step left (the backfills'
rate and concurrency cap) and what is seen now (how much of its freshness target each live job
uses, how fast the backfills go), the next rate and cap and why.

AIMD, as TCP paces a sender: while any live job misses its target, or uses more than `slow_above`
of it (the batches already running hold the worker for a while after a cut, so a controller that
waits for the miss is late), the backfills' shared rate is multiplied by `decrease_factor` and
their concurrency cap halved; while every one uses at most `speed_below` of its target, the rate
grows by `increase_fraction` of the reference rate (the backfills' own pace when nothing held them
back) and the cap by one, until both are lifted; in between the limit is held. The rate never
goes below a floor that lets each running backfill start one batch per throttle window, nor the
cap below one, so every backfill keeps moving. A person's pin replaces the limit (acquire applies
it) and the rule holds its own state until the pin is removed.

The service (freshness.py) reads the observation, applies the decision in one transaction and
records it; the benchmark (bench/bench_freshness_throttle.py) runs it through the pacing step on
a real worker, and its simulation (bench/freshness_simulation.py) calls it directly.
"""

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ControlSettings:
    increase_fraction: float = 0.1
    decrease_factor: float = 0.5
    floor_fraction: float = 0.05
    # the backfills slow down once a live job uses more than this share of its target (the
    # batches already running hold the worker a while after a cut, so acting at the miss is late),
    # and speed up only while every one uses at most `speed_below` of it; in between, held
    slow_above: float = 0.5
    speed_below: float = 0.25


@dataclass(frozen=True)
class ControlState:
    """What the controller set: None = no limit from it."""

    rate: int | None = None  # weight per throttle window, all backfills together
    concurrency: int | None = None  # running batches per backfill
    reference_rate: int | None = None  # backfills' weight per window when last unthrottled


@dataclass(frozen=True)
class Observation:
    # each live job with a target: (name, how much of its target it uses: 1.0 = at the target)
    load: tuple[tuple[str, float], ...] = ()
    backfills: int = 0  # running backfills
    backfill_rate: int = 0  # weight of backfill batches started in the last window
    backfill_concurrency: int = 1  # the largest max_concurrency of the running backfills
    floor_weight: int = 1  # one batch per running backfill: the sum of their jobs' batch_weight
    pinned_rate: int | None = None

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(name for name, used in self.load if used > 1)

    def above(self, share: float) -> tuple[str, ...]:
        return tuple(name for name, used in self.load if used > share)


@dataclass(frozen=True)
class Decision:
    state: ControlState
    reason: str
    changed: bool  # the limit (rate or concurrency cap) moved


def floor_rate(*, state: ControlState, observed: Observation, settings: ControlSettings) -> int:
    """The lowest rate the controller sets: each running backfill may start one batch a window,
    and never less than `floor_fraction` of the reference rate."""
    share = math.ceil((state.reference_rate or 0) * settings.floor_fraction)
    return max(1, observed.floor_weight, share)


def _rate_text(rate: int | None) -> str:
    return "unlimited" if rate is None else f"{rate}/min"


def _cap_text(cap: int | None) -> str:
    return "uncapped" if cap is None else str(cap)


def _moves(old: ControlState, new: ControlState) -> str:
    parts = []
    if old.rate != new.rate:
        parts.append(f"rate {_rate_text(old.rate)} -> {_rate_text(new.rate)}")
    if old.concurrency != new.concurrency:
        cap = f"concurrency {_cap_text(old.concurrency)} -> {_cap_text(new.concurrency)}"
        parts.append(cap)
    return "; ".join(parts)


def _who(names: tuple[str, ...], how: str = "miss") -> str:
    shown = ", ".join(names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    verb = "miss their target" if how == "miss" else f"{how} their target"
    return f"{len(names)} live job(s) {verb} ({shown}{more})"


def decide(
    *, state: ControlState, observed: Observation, settings: ControlSettings | None = None
) -> Decision:
    """The next state of the controller and the reason, for one step."""
    settings = settings or ControlSettings()
    if observed.pinned_rate is not None:
        # the pin is applied on top (acquire reads it first); the controller's own state waits,
        # so removing the pin hands back the rate the controller had
        reason = (
            f"pinned at {observed.pinned_rate}/min by a person; the controller holds "
            f"{_rate_text(state.rate)} until the pin is removed"
        )
        return Decision(state, reason, False)
    if state.rate is None and observed.backfills:
        # unthrottled: the backfills' own pace is the scale of the cuts and increases to come
        reference = max(observed.backfill_rate, state.reference_rate or 0) or None
        state = replace(state, reference_rate=reference)
    missing = observed.missing
    pressing = observed.above(settings.slow_above)
    if missing:
        cause = _who(missing)
    else:
        cause = f"{_who(pressing, 'above ' + format(settings.slow_above, '.0%') + ' of')}"

    if pressing and observed.backfills == 0:
        return _decision(state, state, f"{cause}; no backfill runs to slow down")
    if pressing:
        base = state.rate if state.rate is not None else max(observed.backfill_rate, 1)
        floor = floor_rate(state=state, observed=observed, settings=settings)
        rate = max(floor, math.floor(base * settings.decrease_factor))
        cap_base = state.concurrency or max(observed.backfill_concurrency, 1)
        new = replace(state, rate=rate, concurrency=max(1, cap_base // 2))
        moves = _moves(state, new)
        if moves:
            return _decision(state, new, f"{cause}: {moves}")
        return _decision(state, new, f"{cause}: held at the floor ({rate}/min, concurrency 1)")

    if state.rate is None and state.concurrency is None:
        return _decision(state, state, "all live jobs inside their target; no limit")
    near = observed.above(settings.speed_below)
    if near:
        return _decision(
            state,
            state,
            f"{_who(near, 'above ' + format(settings.speed_below, '.0%') + ' of')}, none above "
            f"{settings.slow_above:.0%}: limit held",
        )

    reference = state.reference_rate or max(observed.backfill_rate, 1)
    step = max(1, math.ceil(reference * settings.increase_fraction))
    rate = None if state.rate is None else state.rate + step
    if rate is not None and rate >= reference:
        rate = None
    concurrency = state.concurrency
    if concurrency is not None:
        concurrency += 1
        if concurrency >= max(observed.backfill_concurrency, 1):
            concurrency = None
    new = replace(state, rate=rate, concurrency=concurrency)
    return _decision(
        state,
        new,
        f"all live jobs within {settings.speed_below:.0%} of their target: {_moves(state, new)}",
    )


def _decision(old: ControlState, new: ControlState, reason: str) -> Decision:
    moved = (old.rate, old.concurrency) != (new.rate, new.concurrency)
    return Decision(new, reason, moved)
