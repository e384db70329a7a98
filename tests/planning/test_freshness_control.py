"""The freshness controller's rule (services/freshness_control.py), step by step, without a
database: steady, overload, recovery, the floor and a person's pin."""

from inventory.services.freshness_control import (
    ControlSettings,
    ControlState,
    Observation,
    decide,
)

SETTINGS = ControlSettings(increase_fraction=0.1, decrease_factor=0.5, floor_fraction=0.05)


def observed(*, missing=(), near=(), **kw) -> Observation:
    """Jobs in `missing` use twice their target, those in `near` 60% of it, a third job 10%."""
    base = dict(backfills=1, backfill_rate=10_000, backfill_concurrency=8, floor_weight=100)
    load = kw.pop("load", None) or (
        *((name, 2.0) for name in missing),
        *((name, 0.6) for name in near),
        ("quiet", 0.1),
    )
    base.update(kw)
    return Observation(load=load, **base)


def test_it_changes_nothing_while_every_live_job_is_inside_and_nothing_is_limited():
    decision = decide(state=ControlState(), observed=observed(), settings=SETTINGS)
    assert decision.state == ControlState(reference_rate=10_000)
    assert not decision.changed
    assert "inside their target" in decision.reason


def test_a_miss_halves_the_rate_from_the_unthrottled_pace_and_the_concurrency():
    decision = decide(state=ControlState(), observed=observed(missing=("live",)), settings=SETTINGS)
    assert decision.changed
    assert decision.state == ControlState(rate=5_000, concurrency=4, reference_rate=10_000)
    assert "1 live job(s) miss their target (live)" in decision.reason
    assert "rate unlimited -> 5000/min" in decision.reason
    assert "concurrency uncapped -> 4" in decision.reason


def test_misses_go_on_cutting_multiplicatively():
    state = ControlState(rate=5_000, concurrency=4, reference_rate=10_000)
    state = decide(state=state, observed=observed(missing=("a", "b")), settings=SETTINGS).state
    assert (state.rate, state.concurrency) == (2_500, 2)
    state = decide(state=state, observed=observed(missing=("a",)), settings=SETTINGS).state
    assert (state.rate, state.concurrency) == (1_250, 1)


def test_it_never_goes_below_the_floor_that_keeps_each_backfill_moving():
    state = ControlState(rate=700, concurrency=1, reference_rate=10_000)
    # floor: one batch of each running backfill a window (2 x 400) beats 5% of the reference
    seen = observed(missing=("live",), backfills=2, floor_weight=800)
    first = decide(state=state, observed=seen, settings=SETTINGS)
    assert (first.state.rate, first.state.concurrency) == (800, 1)
    again = decide(state=first.state, observed=seen, settings=SETTINGS)
    assert (again.state.rate, again.state.concurrency) == (800, 1)
    assert not again.changed
    assert "held at the floor (800/min, concurrency 1)" in again.reason


def test_the_reference_share_is_the_floor_when_batches_are_small():
    state = ControlState(rate=600, concurrency=1, reference_rate=10_000)
    decision = decide(
        state=state, observed=observed(missing=("live",), floor_weight=10), settings=SETTINGS
    )
    assert decision.state.rate == 500  # 5% of 10,000


def test_recovery_adds_a_tenth_of_the_reference_each_step_until_the_limit_is_lifted():
    state = ControlState(rate=5_000, concurrency=4, reference_rate=10_000)
    rates = []
    caps = []
    for _ in range(5):
        decision = decide(state=state, observed=observed(), settings=SETTINGS)
        assert decision.changed
        assert "all live jobs within 25% of their target" in decision.reason
        state = decision.state
        rates.append(state.rate)
        caps.append(state.concurrency)
    assert rates == [6_000, 7_000, 8_000, 9_000, None]
    assert caps == [5, 6, 7, None, None]
    assert not decide(state=state, observed=observed(), settings=SETTINGS).changed


def test_no_backfill_running_leaves_the_state_as_it_is():
    state = ControlState(rate=5_000, concurrency=4, reference_rate=10_000)
    decision = decide(
        state=state, observed=observed(missing=("live",), backfills=0), settings=SETTINGS
    )
    assert decision.state == state
    assert not decision.changed
    assert "no backfill runs" in decision.reason


def test_a_pin_holds_the_rule_whatever_the_live_jobs_do():
    state = ControlState(rate=5_000, concurrency=2, reference_rate=10_000)
    for missing in (("live",), ()):
        pinned = decide(
            state=state, observed=observed(missing=missing, pinned_rate=9_000), settings=SETTINGS
        )
        assert pinned.state == state
        assert not pinned.changed
        assert pinned.reason.startswith("pinned at 9000/min by a person")
        assert "holds 5000/min" in pinned.reason


def test_a_job_above_half_its_target_slows_the_backfills_before_it_misses():
    decision = decide(state=ControlState(), observed=observed(near=("live",)), settings=SETTINGS)
    assert (decision.state.rate, decision.state.concurrency) == (5_000, 4)
    assert "1 live job(s) above 50% of their target (live)" in decision.reason


def test_between_a_quarter_and_half_of_the_target_the_limit_is_held():
    state = ControlState(rate=5_000, concurrency=4, reference_rate=10_000)
    load = (("live", 0.4),)
    decision = decide(state=state, observed=observed(load=load), settings=SETTINGS)
    assert decision.state == state
    assert not decision.changed
    assert "limit held" in decision.reason


def test_the_reference_follows_the_unthrottled_pace_and_scales_the_first_cut():
    state = decide(state=ControlState(), observed=observed(backfill_rate=12_000)).state
    assert state == ControlState(reference_rate=12_000)
    cut = decide(state=state, observed=observed(missing=("live",), backfill_rate=12_000)).state
    assert (cut.rate, cut.reference_rate) == (6_000, 12_000)


def test_a_steady_overload_settles_at_the_floor_and_recovers_once_it_ends():
    state = ControlState()
    for _ in range(20):
        state = decide(state=state, observed=observed(missing=("live",)), settings=SETTINGS).state
    assert (state.rate, state.concurrency) == (500, 1)
    for _ in range(20):
        state = decide(state=state, observed=observed(), settings=SETTINGS).state
    assert state == ControlState(reference_rate=10_000)
