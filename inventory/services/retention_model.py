"""When retention overtakes a reader: the rate model behind the retention-breach forecast.

Pure arithmetic on plain numbers (no Django, no I/O), so it can be tested by simulation. A source
is a sequence of positions (Kafka offsets, Delta versions, Hudi instants) written over time; its
retention deletes a position some time after it was written (Kafka's `retention.ms`, Delta's log
retention and `deletedFileRetentionDuration`, Iceberg's `history.expire.max-snapshot-age-ms`) or
once enough newer positions exist (a Hudi cleaner that keeps N commits, Kafka's `retention.bytes`
as a count of average-sized messages), possibly never while fewer than N newer ones exist
(Iceberg's `history.expire.min-snapshots-to-keep`), possibly only when a periodic run comes round
(VACUUM, the cleaner, snapshot expiry). A job
reads forward from the position it still needs at its recent rate and cannot pass the head.
The forecast is the first time the position the job still needs is deleted, if that happens
before the job catches up with the head (after which it reads each position as it is written).

Times are seconds (any epoch, the same for every input); positions are numbers.
"""

import math
from dataclasses import dataclass, field

HORIZON_SECONDS = 30 * 86_400  # no forecast further ahead than this: "no loss within 30 d"
MAX_RUNS = 20_000  # periodic deletion runs checked at most (bounded time per job)

SAFE = "safe"  # the job catches up with the head before retention reaches it
AT_RISK = "at_risk"  # at the current rates it starts losing data at `loss_at`
LOST = "lost"  # it already needs a position the source no longer holds
NO_LOSS = "no_loss"  # neither: no loss within the horizon (stalled, or retention too long)


@dataclass(frozen=True)
class Timeline:
    """When each position was written: `points`, (position, time) in increasing order, the last
    write at or before `now`; `head` is the next position to be written, written at `rate`
    positions a second from `now` on (0: nothing more is expected)."""

    points: tuple[tuple[float, float], ...]
    head: float
    now: float
    rate: float

    def time_of(self, position: float) -> float:
        if position >= self.head:
            return self.now + (position - self.head) / self.rate if self.rate > 0 else math.inf
        points = [*self.points, (self.head, self.now)]
        if position <= points[0][0]:
            return points[0][1]
        for (p0, t0), (p1, t1) in zip(points, points[1:], strict=False):
            if p0 <= position <= p1:
                return t0 if p1 == p0 else t0 + (t1 - t0) * (position - p0) / (p1 - p0)
        return self.now

    def written_at(self, position: float) -> float:
        """When `position` is written: `time_of` for one written already; one the head has not
        reached yet needs its own write too (the head is written next, not now)."""
        if position < self.head:
            return self.time_of(position)
        return self.time_of(position + 1)


@dataclass(frozen=True)
class Retention:
    """What deletes a position: `seconds` after it was written, or once `positions` newer ones
    exist (None: not by that rule), but never while fewer than `keep` newer ones exist (None: no
    such floor); deleted only when a periodic run comes round when `every` (seconds) is set, the
    last run at `last_run`."""

    seconds: float | None = None
    positions: float | None = None
    every: float | None = None
    last_run: float | None = None
    keep: float | None = None

    def eligible(self, timeline: Timeline, position: float) -> float:
        """When `position` may be deleted (before any periodic run)."""
        at = math.inf
        if self.seconds is not None:
            at = min(at, timeline.time_of(position) + self.seconds)
        if self.positions is not None:
            at = min(at, timeline.time_of(position + self.positions))
        if self.keep is not None:
            at = max(at, timeline.written_at(position + self.keep))
        return at

    def breakpoints(self, timeline: Timeline) -> list[float]:
        """Positions where `eligible` changes slope."""
        known = [p for p, _t in timeline.points] + [timeline.head]
        found = []
        if self.seconds is not None:
            found += known
        if self.positions is not None:
            found += [p - self.positions for p in known]
        if self.keep is not None:
            found += [p - self.keep for p in known]
        return found


@dataclass(frozen=True)
class Reader:
    """The job: the next position it needs (`position`; also the oldest a pending backfill or
    restatement needs), and how many positions a second it has read lately."""

    position: float
    rate: float


@dataclass(frozen=True)
class Forecast:
    verdict: str  # SAFE, AT_RISK, LOST or NO_LOSS
    loss_at: float | None  # when it starts losing data (AT_RISK; `now` for LOST)
    margin_seconds: float | None  # loss_at - now
    caught_up_at: float | None = None  # when it reaches the head (SAFE)
    notes: list[str] = field(default_factory=list)


def forecast(
    *,
    timeline: Timeline,
    retention: Retention,
    reader: Reader,
    first: float | None = None,
    horizon: float = HORIZON_SECONDS,
) -> Forecast:
    """The first time the position `reader` needs is deleted, at the current rates. `first`: the
    oldest position the source holds now (below it, the loss already happened)."""
    now = timeline.now
    if first is not None and reader.position < first:
        return Forecast(LOST, now, 0.0)
    behind = max(timeline.head - reader.position, 0.0)
    consume, produce = max(reader.rate, 0.0), max(timeline.rate, 0.0)
    caught_up = None
    if behind == 0:
        caught_up = now
    elif consume > produce:
        caught_up = now + behind / (consume - produce)
    end = min(caught_up if caught_up is not None else math.inf, now + horizon)

    def at(t: float) -> float:
        """The position the job needs at time t."""
        return min(reader.position + consume * (t - now), timeline.head + produce * (t - now))

    if retention.every:
        loss = _first_run_loss(timeline, retention, at, now, end)
    else:
        loss = _first_crossing(timeline, retention, reader, at, now, end, consume)
    if loss is not None:
        return Forecast(AT_RISK, loss, loss - now)
    if caught_up is not None and caught_up <= now + horizon:
        return Forecast(SAFE, None, None, caught_up_at=caught_up)
    return Forecast(NO_LOSS, None, None)


def _first_crossing(timeline, retention, reader, at, now, end, consume) -> float | None:
    """The first t in [now, end] with eligible(at(t)) <= t: between breakpoints both sides are
    linear in t, so each segment is checked at its ends and solved exactly."""
    times = {now, end}
    if consume > 0:
        for position in retention.breakpoints(timeline):
            t = now + (position - reader.position) / consume
            if now < t < end:
                times.add(t)
    ordered = sorted(t for t in times if math.isfinite(t))
    if not ordered:
        return None

    def gap(t: float) -> float:
        return retention.eligible(timeline, at(t)) - t

    previous = ordered[0]
    before = gap(previous)
    if before <= 0:
        return previous
    for t in ordered[1:]:
        after = gap(t)
        if after <= 0:
            if not math.isfinite(before):
                return t
            return previous + (t - previous) * before / (before - after)
        previous, before = t, after
    return None


def _first_run_loss(timeline, retention, at, now, end) -> float | None:
    """Deletion happens only at runs every `every` seconds from `last_run`: the first run at which
    the position the job then needs has become eligible."""
    every = retention.every
    last = retention.last_run if retention.last_run is not None else now
    k = max(math.ceil((now - last) / every), 0)
    if last + k * every < now:
        k += 1
    for _ in range(MAX_RUNS):
        run = last + k * every
        if run > end:
            return None
        if retention.eligible(timeline, at(run)) <= run:
            return run
        k += 1
    return None


_ORDER = {LOST: 0, AT_RISK: 1, NO_LOSS: 2, SAFE: 3}


def first_loss(results: list[tuple[str, Forecast]]) -> tuple[str, Forecast]:
    """Of several streams' forecasts (a partition's time and size rules, a table's vacuum and log
    cleanup), the one that decides: a loss now, else the earliest loss, else no loss, else safe."""
    return min(
        results,
        key=lambda r: (_ORDER[r[1].verdict], r[1].loss_at if r[1].loss_at is not None else 0),
    )


def describe(result: Forecast) -> str:
    """One sentence for people (times in seconds from now)."""
    if result.verdict == LOST:
        return "losing data now: the job needs data the source no longer holds"
    if result.verdict == AT_RISK:
        return f"at current rates this job starts losing data in ~{_human(result.margin_seconds)}"
    if result.verdict == SAFE:
        return "safe: catching up faster than retention advances"
    return f"no loss forecast within {_human(HORIZON_SECONDS)} at current rates"


def _human(seconds: float) -> str:
    seconds = max(seconds, 0)
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.1f} {unit}" if value < 10 else f"{round(value)} {unit}"
    return f"{round(seconds)} s"
