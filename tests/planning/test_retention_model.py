"""The retention-breach rate model against a simulation of a source and a slow reader.

The simulation steps a source that writes positions on a schedule, deletes them by its retention
rule (age, count, or only at periodic runs) and a reader that reads forward at a fixed rate: the
first time the reader needs a deleted position is the truth the model's forecast, made at the
start from the write history and the rates alone, is compared with.
"""

import math

import pytest

from inventory.services import retention_model as model
from inventory.sources.kafka import retention as kafka_retention

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
    write_times,
    *,
    start,
    position,
    rate,
    seconds=None,
    positions=None,
    every=None,
    last_run=0.0,
    keep=None,
    until=None,
):
    """The first time (>= start) the reader's next position is deleted, or None; periodic runs
    every `every` seconds after `last_run`; the newest `keep` positions are never deleted; up to
    `until` (default: the last write)."""
    t, needed = start, float(position)
    deleted_below = 0
    while t < (write_times[-1] if until is None else until):
        written = _count_le(write_times, t)
        due = (not every) or (t - last_run >= every - 1e-9)
        if due:
            if every:
                last_run = t
            while (
                deleted_below < written
                and (
                    (seconds is not None and write_times[deleted_below] + seconds <= t)
                    or (positions is not None and written - deleted_below > positions)
                )
                and (keep is None or written - deleted_below > keep)
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


def test_snapshots_expired_by_age_at_runs_but_the_newest_kept_when_the_writes_stop():
    """Iceberg's expiry: older than the max age, at the runs, never the newest `keep`."""
    times = writes(lambda t: 10.0 if t < 50 else 0.0, until=300)
    kwargs = {"seconds": 30, "keep": 100, "every": 10, "last_run": 50.0}
    now = 52.0
    # written at t=35, older than 30 s at 65: gone at the run at 70
    actual = simulate(times, start=now, position=350, rate=0, until=300, **kwargs)
    forecast = predict(times, now=now, position=350, rate=0, **kwargs)
    assert forecast.verdict == model.AT_RISK and forecast.loss_at == pytest.approx(70)
    assert actual == pytest.approx(70, abs=0.2)
    # among the newest 100 of a table no longer written (no write in the rate's window): kept
    # however old
    assert simulate(times, start=now, position=420, rate=0, until=300, **kwargs) is None
    idle = predict(times, now=now, position=420, rate=0, window=1.0, **kwargs)
    assert idle.verdict == model.NO_LOSS
    # while writes are still expected at the last 30 s's rate, 100 more push it out
    busy = predict(times, now=now, position=420, rate=0, **kwargs)
    assert busy.verdict == model.AT_RISK and busy.loss_at > now


def test_the_newest_kept_decide_when_they_outlast_the_max_age():
    """Slow writes: a position is older than the max age long before `keep` newer ones exist,
    so it goes when the keep-th newer one is written (a slow reader, expiry at every step)."""
    times = writes(lambda t: 1.0, until=400)
    now, position = 100.0, 80  # written at t=80 (about), 20 behind
    kwargs = {"seconds": 5, "keep": 30}
    actual = simulate(times, start=now, position=position, rate=0.5, **kwargs)
    forecast = predict(times, now=now, position=position, rate=0.5, **kwargs)
    assert forecast.verdict == model.AT_RISK and actual is not None
    # the gap grows by 0.5 a second from 20: 30 newer ones exist after 20 s. The model's reader
    # moves smoothly where the simulated one needs whole positions: it may be late by the time
    # of one position (2 s at this reader's pace)
    assert forecast.loss_at == pytest.approx(actual, abs=2.5)
    assert forecast.margin_seconds == pytest.approx(20, abs=2.5)
    # with the keep rule alone the max age would have taken it already
    assert predict(times, now=now, position=position, rate=0.5, seconds=5).margin_seconds == 0


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


# ---- retention.bytes: a Kafka partition's size limit ------------------------------------------


def simulate_bytes(write_times, sizes, *, start, position, rate, limit):
    """The first time (>= start) the reader's next message is deleted by a size limit: the
    oldest message goes while the rest of the log still holds `limit` bytes (Kafka's rule for
    segments, at message granularity)."""
    t, needed = start, float(position)
    deleted_below = counted = held = 0
    while t < write_times[-1]:
        written = _count_le(write_times, t)
        held += sum(sizes[counted:written])
        counted = written
        while deleted_below < written and held - sizes[deleted_below] >= limit:
            held -= sizes[deleted_below]
            deleted_below += 1
        if int(needed) < deleted_below:
            return t
        needed = min(needed + rate * STEP, written)
        t += STEP
    return None


def predict_partition(write_times, sizes, *, now, position, rate, limit, seconds=None, window=30):
    """The Kafka probe's streams for one partition (its time rule when `seconds`, its size rule
    from the average of the last SIZE_SAMPLE messages, as it samples them) and the forecast that
    decides: (stream name, forecast, {stream name: inputs})."""
    written = [(float(p), w) for p, w in enumerate(write_times) if w <= now]
    recent = [w for _p, w in written if w > now - window]
    timeline = model.Timeline(
        points=tuple(written[:: max(len(written) // 400, 1)]),
        head=float(len(written)),
        now=now,
        rate=len(recent) / window,
    )
    tail = sizes[max(len(written) - kafka_retention.SIZE_SAMPLE, 0) : len(written)]
    streams = kafka_retention.partition_streams(
        partition=0,
        timeline=timeline,
        reader=model.Reader(position, rate),
        low=0,
        retention_seconds=seconds,
        retention_bytes=limit,
        average_bytes=sum(tail) / len(tail) if tail else None,
        inputs={},
    )
    results = [
        (name, model.forecast(timeline=tl, retention=r, reader=rd, first=first), inputs)
        for name, tl, r, rd, first, inputs in streams
    ]
    name, decided = model.first_loss([(name, result) for name, result, _ in results])
    return name, decided, {name: inputs for name, _result, inputs in results}


def test_a_size_limit_overtakes_a_slower_reader_of_a_steady_partition_when_the_model_says():
    times = writes(steady, until=400)
    sizes = [100] * len(times)
    now, position, limit = 100.0, 600, 50_000  # 400 behind a head of 1000, 500 messages kept
    actual = simulate_bytes(times, sizes, start=now, position=position, rate=5, limit=limit)
    name, forecast, inputs = predict_partition(
        times, sizes, now=now, position=position, rate=5, limit=limit
    )
    assert (name, forecast.verdict) == ("partition 0 by size", model.AT_RISK)
    # the gap to the head grows by 10 - 5 a second from 400: 20 s to 500 newer messages
    assert forecast.margin_seconds == pytest.approx(20, rel=0.02)
    assert forecast.loss_at == pytest.approx(actual, abs=0.2)
    shown = inputs["partition 0 by size"]
    assert shown["rule"] == "retention.bytes" and shown["retention_bytes"] == limit
    assert (shown["message_bytes"], shown["limit_messages"]) == (100, 500)
    assert shown["log_bytes"] == 1000 * 100 and shown["bytes_ahead"] == 400 * 100
    assert shown["written_bytes_per_second"] == pytest.approx(1000, rel=0.02)


def test_a_bursty_partition_under_a_size_limit_is_forecast_from_its_average_growth():
    times = writes(bursty, until=1200)
    sizes = [100 + (p % 7) * 20 for p in range(len(times))]  # 160 bytes on average
    now, window = 400.0, 200  # four whole cycles of bursts: their average rate
    head = sum(1 for w in times if w <= now)
    position, limit = head - 1000, 3000 * 160
    actual = simulate_bytes(times, sizes, start=now, position=position, rate=4, limit=limit)
    name, forecast, _ = predict_partition(
        times, sizes, now=now, position=position, rate=4, limit=limit, window=window
    )
    assert name == "partition 0 by size" and forecast.verdict == model.AT_RISK
    assert actual is not None
    assert forecast.loss_at - now == pytest.approx(actual - now, rel=0.15)


def test_a_stalled_reader_loses_its_message_once_the_limit_of_newer_ones_is_written():
    times = writes(steady, until=300)
    sizes = [250] * len(times)
    now, position, limit = 50.0, 200, 500 * 250  # 300 behind a head of 500
    actual = simulate_bytes(times, sizes, start=now, position=position, rate=0, limit=limit)
    _name, forecast, _ = predict_partition(
        times, sizes, now=now, position=position, rate=0, limit=limit
    )
    assert forecast.verdict == model.AT_RISK
    assert forecast.loss_at == pytest.approx(70, abs=0.2)  # 200 more messages at 10 a second
    assert actual == pytest.approx(70, abs=0.2)


def test_a_stalled_writer_grows_no_log_so_the_time_rule_comes_first():
    times = writes(lambda t: 10.0 if t < 50 else 0.0, until=300)
    sizes = [100] * len(times)
    now, position = 100.0, 200  # written at t=20; nothing written since t=50
    name, forecast, inputs = predict_partition(
        times, sizes, now=now, position=position, rate=0, limit=60_000, seconds=120
    )
    assert simulate_bytes(times, sizes, start=now, position=position, rate=0, limit=60_000) is None
    assert name == "partition 0" and forecast.verdict == model.AT_RISK
    assert forecast.loss_at == pytest.approx(140, abs=0.2)  # written at 20, kept 120 s
    assert inputs["partition 0"]["rule"] == "retention.ms"
    assert inputs["partition 0 by size"]["written_bytes_per_second"] == 0


def test_the_size_rule_decides_when_it_comes_before_the_time_rule_and_not_after():
    times = writes(steady, until=400)
    sizes = [100] * len(times)
    kwargs = {"now": 100.0, "position": 600, "rate": 5}
    name, forecast, _ = predict_partition(times, sizes, limit=50_000, seconds=3600, **kwargs)
    assert name == "partition 0 by size" and forecast.margin_seconds == pytest.approx(20, rel=0.02)
    # the needed message was written at t=60 and ages by half a second a second from 40 s: a
    # 45 s retention.ms takes it in 10 s, before the size limit's 20
    name, forecast, _ = predict_partition(times, sizes, limit=50_000, seconds=45, **kwargs)
    assert name == "partition 0" and forecast.margin_seconds == pytest.approx(10, rel=0.02)


def test_a_partition_whose_messages_could_not_be_measured_has_no_size_forecast_and_says_so():
    timeline = model.Timeline(points=((0, 0), (10, 5)), head=10, now=10, rate=0)
    [stream] = kafka_retention.partition_streams(
        partition=3,
        timeline=timeline,
        reader=model.Reader(0, 0),
        low=0,
        retention_seconds=None,
        retention_bytes=1024,
        average_bytes=None,
        inputs={},
    )
    name, _timeline, retention, reader, _first, inputs = stream
    assert name == "partition 3 by size" and "not forecast yet" in inputs["note"]
    assert "message_bytes" not in inputs
    result = model.forecast(timeline=timeline, retention=retention, reader=reader)
    assert result.verdict == model.NO_LOSS
