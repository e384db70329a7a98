"""The retention-breach rate model against a simulation of a source and a slow reader.

The simulation steps a source that writes positions on a schedule, deletes them by its retention
rule (age, count, or only at periodic runs) and a reader that reads forward at a fixed rate: the
first time the reader needs a deleted position is the truth the model's forecast, made at the
start from the write history and the rates alone, is compared with.
"""

import math

import pytest

from inventory.services import retention_model as model

STEP = 0.05  # seconds per simulation step


def writes(schedule, *, until):
    """Write times of positions 0, 1, 2... for `schedule(t)` positions a second."""
    times, t, owed = [], 0.0, 0.0
    while t < until:
        owed += schedule(t) * STEP
        while owed >= 1:
            times.append(t)
            owed -= 1
        t += STEP
    return times


def simulate(
    write_times, *, start, position, rate, seconds=None, positions=None, every=None, last_run=0.0
):
    """The first time (>= start) the reader's next position is deleted, or None; periodic runs
    every `every` seconds after `last_run`."""
    t, needed = start, float(position)
    deleted_below = 0
    while t < write_times[-1]:
        written = _count_le(write_times, t)
        due = (not every) or (t - last_run >= every - 1e-9)
        if due:
            if every:
                last_run = t
            while deleted_below < written and (
                (seconds is not None and write_times[deleted_below] + seconds <= t)
                or (positions is not None and written - deleted_below > positions)
            ):
                deleted_below += 1
        if int(needed) < deleted_below:
            return t
        needed = min(needed + rate * STEP, written)
        t += STEP
    return None


def _count_le(values, t):
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] <= t:
            lo = mid + 1
        else:
            hi = mid
    return lo


def predict(write_times, *, now, position, rate, window=30.0, **retention):
    written = [(float(p), w) for p, w in enumerate(write_times) if w <= now]
    head = float(len(written))
    recent = [w for _p, w in written if w > now - window]
    timeline = model.Timeline(
        points=tuple(written[:: max(len(written) // 400, 1)]),
        head=head,
        now=now,
        rate=len(recent) / window,
    )
    return model.forecast(
        timeline=timeline,
        retention=model.Retention(**retention),
        reader=model.Reader(position, rate),
    )


def steady(_t):
    return 10.0


def bursty(t):
    return 50.0 if (t % 50) < 10 else 0.0  # 10 a second on average, in bursts


def test_a_steady_source_and_a_slower_reader_lose_data_when_the_model_says():
    times = writes(steady, until=400)
    now, position = 100.0, 400  # the reader needs what was written at t=40
    actual = simulate(times, start=now, position=position, rate=5, seconds=100)
    forecast = predict(times, now=now, position=position, rate=5, seconds=100)
    assert forecast.verdict == model.AT_RISK
    assert actual is not None
    # age of the needed position grows by 1 - 5/10 per second from 60 s: 80 s to its 100th
    assert forecast.margin_seconds == pytest.approx(80, rel=0.02)
    assert forecast.loss_at == pytest.approx(actual, rel=0.02)


def test_a_bursty_source_is_forecast_from_its_write_history():
    times = writes(bursty, until=600)
    now, position = 160.0, 200
    actual = simulate(times, start=now, position=position, rate=4, seconds=120)
    forecast = predict(times, now=now, position=position, rate=4, seconds=120)
    assert forecast.verdict == model.AT_RISK and actual is not None
    assert forecast.loss_at - now == pytest.approx(actual - now, rel=0.1)


def test_a_stalled_reader_loses_its_position_when_it_reaches_the_retention():
    times = writes(steady, until=300)
    now, position = 50.0, 300  # written at t=30
    actual = simulate(times, start=now, position=position, rate=0, seconds=60)
    forecast = predict(times, now=now, position=position, rate=0, seconds=60)
    assert forecast.verdict == model.AT_RISK
    assert forecast.loss_at == pytest.approx(90, abs=0.2)
    assert actual == pytest.approx(90, abs=0.2)


def test_a_reader_faster_than_the_writes_is_safe_and_the_simulation_agrees():
    times = writes(steady, until=400)
    now, position = 100.0, 700
    assert simulate(times, start=now, position=position, rate=25, seconds=100) is None
    forecast = predict(times, now=now, position=position, rate=25, seconds=100)
    assert forecast.verdict == model.SAFE
    assert forecast.caught_up_at == pytest.approx(100 + 300 / 15, rel=0.02)
    assert model.describe(forecast) == "safe: catching up faster than retention advances"


def test_a_reader_faster_than_the_writes_still_loses_inside_an_old_burst():
    times = writes(lambda t: 50.0 if t < 60 else 2.0, until=600)
    now, position = 70.0, 500  # written at t=10 in a burst of 50 a second; 2 a second now
    actual = simulate(times, start=now, position=position, rate=10, seconds=100)
    forecast = predict(times, now=now, position=position, rate=10, seconds=100)
    assert forecast.verdict == model.AT_RISK and actual is not None
    # through the burst its age grows by 1 - 10/50 per second from 60 s: 50 s to its 100th
    assert forecast.loss_at == pytest.approx(120, rel=0.02)
    assert forecast.loss_at == pytest.approx(actual, rel=0.02)


def test_a_cleaner_keeping_n_positions_and_running_periodically():
    times = writes(steady, until=500)
    now, position = 100.0, 500
    kwargs = {"positions": 800, "every": 30}
    actual = simulate(times, start=now, position=position, rate=3, last_run=90.0, **kwargs)
    forecast = predict(times, now=now, position=position, rate=3, last_run=90.0, **kwargs)
    assert forecast.verdict == model.AT_RISK and actual is not None
    # eligible once head - needed > 800: 1000 + 10 d - (500 + 3 d) > 800 -> d > 43; next run 150
    assert forecast.loss_at == pytest.approx(150)
    assert actual == pytest.approx(150, abs=0.2)


def test_a_position_below_the_oldest_held_is_lost_now():
    timeline = model.Timeline(points=((0, 0), (100, 10)), head=100, now=10, rate=10)
    result = model.forecast(
        timeline=timeline, retention=model.Retention(seconds=5), reader=model.Reader(3, 1), first=7
    )
    assert (result.verdict, result.margin_seconds) == (model.LOST, 0.0)


def test_no_loss_within_the_horizon_when_nothing_is_written_and_retention_is_long():
    timeline = model.Timeline(points=((0, 0),), head=10, now=10, rate=0)
    result = model.forecast(
        timeline=timeline,
        retention=model.Retention(seconds=100 * 86_400),
        reader=model.Reader(5, 0),
    )
    assert result.verdict == model.NO_LOSS and result.loss_at is None
    assert math.isinf(model.Retention().eligible(timeline, 5))
