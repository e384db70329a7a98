"""The freshness controller's rule, without Django: given what the last step left (the backfills'
rate and concurrency cap) and what is seen now (which live jobs miss their freshness target, how
fast the backfills go), the next rate and cap and why.

AIMD, as TCP paces a sender: while any live job misses its target the backfills' shared rate is
multiplied by `decrease_factor` and their concurrency cap halved; while all are inside, the rate
grows by `increase_fraction` of the reference rate (the backfills' own pace when nothing held them
back) and the cap by one, until both are lifted. The rate never goes below a floor that lets each
running backfill start one batch per throttle window, nor the cap below one, so every backfill
keeps moving. A person's pin replaces the rule until it is removed.

The service (freshness.py) reads the observation, applies the decision in one transaction and
records it; the benchmark (bench/bench_freshness_throttle.py) drives this same function.
"""

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ControlSettings:
    increase_fraction: float = 0.1
    decrease_factor: float = 0.5
    floor_fraction: float = 0.05


@dataclass(frozen=True)
class ControlState:
    """What the controller set: None = no limit from it."""

    rate: int | None = None  # weight per throttle window, all backfills together
    concurrency: int | None = None  # running batches per backfill
    reference_rate: int | None = None  # backfills' weight per window when last unthrottled


@dataclass(frozen=True)
class Observation:
    missing: tuple[str, ...] = ()  # live jobs outside their target, by name
    backfills: int = 0  # running backfills
    backfill_rate: int = 0  # weight of backfill batches started in the last window
    backfill_concurrency: int = 1  # the largest max_concurrency of the running backfills
    floor_weight: int = 1  # one batch per running backfill: the sum of their jobs' batch_weight
    pinned_rate: int | None = None


@dataclass(frozen=True)
class Decision:
    state: ControlState
    reason: str
    changed: bool


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


def _who(missing: tuple[str, ...]) -> str:
    shown = ", ".join(missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return f"{len(missing)} live job(s) miss their target ({shown}{more})"


def decide(
    *, state: ControlState, observed: Observation, settings: ControlSettings | None = None
) -> Decision:
    """The next state of the controller and the reason, for one step."""
    settings = settings or ControlSettings()
    if observed.pinned_rate is not None:
        new = replace(state, rate=observed.pinned_rate, concurrency=None)
        moves = _moves(state, new)
        reason = f"pinned at {observed.pinned_rate}/min by a person" + (
            f": {moves}" if moves else ""
        )
        return Decision(new, reason, new != state)

    if observed.missing and observed.backfills == 0:
        return Decision(state, f"{_who(observed.missing)}; no backfill runs to slow down", False)
    if observed.missing:
        if state.rate is None:
            # the first cut starts from the pace the backfills had unthrottled, which also
            # becomes the scale of the increases that follow
            reference = max(observed.backfill_rate, state.reference_rate or 0, 1)
            state_from = replace(state, reference_rate=reference)
            base = max(observed.backfill_rate, 1)
        else:
            state_from = state
            base = state.rate
        floor = floor_rate(state=state_from, observed=observed, settings=settings)
        rate = max(floor, math.floor(base * settings.decrease_factor))
        cap_base = state.concurrency or max(observed.backfill_concurrency, 1)
        concurrency = max(1, cap_base // 2)
        new = replace(state_from, rate=rate, concurrency=concurrency)
        moves = _moves(state, new)
        if moves:
            reason = f"{_who(observed.missing)}: {moves}"
        else:
            reason = f"{_who(observed.missing)}: held at the floor ({rate}/min, concurrency 1)"
        return Decision(new, reason, new != state)

    if state.rate is None and state.concurrency is None:
        return Decision(state, "all live jobs inside their target; no limit", False)

    reference = state.reference_rate or max(observed.backfill_rate, 1)
    step = max(1, math.ceil(reference * settings.increase_fraction))
    rate = None if state.rate is None else state.rate + step
    if rate is not None and rate >= reference:
        rate = None
    concurrency = None if state.concurrency is None else state.concurrency + 1
    if concurrency is not None and concurrency >= max(observed.backfill_concurrency, 1):
        concurrency = None
    new = replace(state, rate=rate, concurrency=concurrency)
    return Decision(new, f"all live jobs inside their target: {_moves(state, new)}", True)
