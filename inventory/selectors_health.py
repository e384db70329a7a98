"""Reads for "is my data current, and if not, why": jobs' states and lags (Health, from
dashboard.sql: job_health), last batches, last-day rates, ETAs (alerts: selectors_alerts.py).

A page reads job_health once (dashboard.sql: health_read: its counts by state, its jobs and its
slices of the job alerts in one statement) and builds rows only for the jobs it shows.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from inventory import selectors
from inventory.models import WatermarkType, weight_unit
from inventory.sql import gateway, json_value

HOURS = 24  # the sparklines' window, one bucket per hour
# a watermark may sit still for this many schedule intervals (plus a lease) before it is late
STALE_INTERVALS = 3


@dataclass
class LastBatch:
    id: int
    kind: str
    status: str
    finished_at: datetime | None


@dataclass
class JobRates:
    """Per-hour counts over the last day, oldest bucket first (index HOURS-1 = the current clock
    hour, UTC)."""

    succeeded: list[int] = field(default_factory=lambda: [0] * HOURS)
    failed: list[int] = field(default_factory=lambda: [0] * HOURS)
    items: list[int] = field(default_factory=lambda: [0] * HOURS)
    weight: list[int] = field(default_factory=lambda: [0] * HOURS)

    @property
    def success_rate(self) -> list[float | None]:
        return [
            None if s + f == 0 else round(s / (s + f), 3)
            for s, f in zip(self.succeeded, self.failed, strict=True)
        ]

    @property
    def day_success_rate(self) -> float | None:
        s, f = sum(self.succeeded), sum(self.failed)
        return None if s + f == 0 else s / (s + f)

    # how much of the current (last) clock hour has passed, 0..1: the last bucket is partial
    elapsed: float = 1.0

    @property
    def items_per_second(self) -> float:
        """The recent commit rate: items committed in the last 60 minutes, estimated from the
        current clock hour and the part of the previous one those minutes still cover."""
        last_hour = self.items[-1] + self.items[-2] * (1 - min(max(self.elapsed, 0.0), 1.0))
        return last_hour / 3600


def last_batches(job_ids: list[int]) -> dict[int, LastBatch]:
    """Job id -> its newest batch (index batch_job_recent_idx, one probe per job)."""
    return {
        row.job_id: LastBatch(row.id, row.kind, row.status, row.finished_at)
        for row in gateway.last_batches(job_ids=job_ids)
    }


def jobs_rates(
    job_id: int | None = None, *, job_ids: list[int] | None = None
) -> dict[int, JobRates]:
    """Job id -> attempts finished per UTC clock hour over the last day (the current hour last),
    with the items and weight of the succeeded ones; of one job, of `job_ids`, or of all.

    Read from the rollup the commit and failure transactions keep (models.JobHourlyRates, a
    trigger in sql/schema/rates.sql): at most HOURS rows per job (its unique index), never the
    day's batches or attempts."""
    ids = [job_id] if job_id is not None else job_ids
    rates: dict[int, JobRates] = {}
    for row in gateway.hourly_rates(job_ids=ids, hours=HOURS):
        if not 0 <= row.hours_ago < HOURS:
            continue
        rate = rates.setdefault(row.job_id, JobRates())
        rate.elapsed = float(row.hour_elapsed)
        slot = HOURS - 1 - row.hours_ago
        rate.succeeded[slot] += row.succeeded
        rate.failed[slot] += row.failed
        rate.items[slot] += int(row.items)
        rate.weight[slot] += int(row.weight)
    return rates


@dataclass(slots=True)
class WatermarkRow:
    type: str
    value: object
    position: int
    updated_at: datetime


@dataclass(slots=True)
class BatchRef:
    """A batch named by a row: its id and status (pk for templates that link to it)."""

    id: int
    status: str

    @property
    def pk(self) -> int:
        return self.id


@dataclass(slots=True)
class ConnectorRef:
    name: str
    state: str
    weight_unit: str = ""  # models.weight_unit: how the overview shows the lag's weight


@dataclass(slots=True)
class JobRow:
    """One job as the overview, the alerts and /metrics read it: plain values from one SQL row
    (dashboard.sql: job_health), no model instances."""

    id: int
    name: str
    paused: bool
    schedule_seconds: int | None
    lease_seconds: int
    watermark_type: str
    connector: ConnectorRef
    watermark: WatermarkRow
    n_queued: int = 0
    n_running: int = 0
    n_failed: int = 0
    n_dead: int = 0
    lag: selectors.Lag | None = None
    late: timedelta | None = None
    # what the overview says about the job: job_health's rule, worst first in STATES
    state: str = ""
    blocker: BatchRef | None = None
    time_lag: timedelta | None = None
    # /metrics' rows only (Health.rows): the open batches' counts in OPEN_BY_KIND's order (empty
    # where the job has no open batch)
    open_by_kind: tuple = ()
    # the page's rows only (see rows_detail)
    last_batch: LastBatch | None = None
    rates: JobRates | None = None
    eta: timedelta | None = None

    @property
    def pk(self) -> int:
        return self.id


# the overview's order: the jobs that need a person first (job_health's state_rank)
STATES = (
    "blocked",
    "late",
    "failing",
    "unreadable",
    "connector",
    "paused",
    "catching_up",
    "current",
)

# (kind, status) of the open-batch counts that health_all returns for each job, in its array's
# order (dashboard.sql: job_health's open_batches)
OPEN_BY_KIND = tuple(
    (kind, status)
    for kind in ("incremental", "backfill")
    for status in ("queued", "running", "failed", "dead")
)


class Health:
    """Reads of dashboard.sql's job_health, the one rule for a job's state. A page reads it once
    (health_read): its counts by state, its page of jobs and its slices of the job alerts come
    from one statement; the lag (one index probe each) is read only for the rows returned.

    The window (the page's query, state filter and slice, the alerts' slice) is given up front;
    a call asking for another one reads again.

    The jobs reading a local meta table in place or another job's commits have no prefix sums:
    their lag is counted once per Health, in their own tables (selectors.jobs_lag_by_id), and
    handed to the statements."""

    def __init__(
        self,
        *,
        query: str = "",
        connector: str = "",
        state: str = "",
        limit: int = 0,
        offset: int = 0,
        alert_limit: int | None = 0,
        alert_offset: int = 0,
        reaper: int = 0,
    ):
        self._params = None
        self._window = {
            "q": _needle(query),
            "connector": connector,
            "state": state,
            "limit": limit,
            "offset": offset,
            "alert_limit": alert_limit,
            "alert_offset": alert_offset,
            "reaper": reaper,
        }
        self._found: dict[str, list] | None = None

    def params(self, **extra) -> dict:
        if self._params is None:
            outside = gateway.outside_jobs()
            lags = selectors.jobs_lag_by_id(outside)
            self._params = {
                "ext_ids": outside,
                "ext_items": [lags[pk].items if lags.get(pk) else None for pk in outside],
                "ext_weights": [lags[pk].weight if lags.get(pk) else None for pk in outside],
                "stale": STALE_INTERVALS,
                "states": list(STATES),
                "ids": None,  # every job (health_of: the jobs asked about)
            }
        return {**self._params, **extra}

    def fetch(self, name: str, **extra) -> list[tuple]:
        return gateway.health_rows(name=name, params=self.params(**extra))

    def _read(self, **window) -> dict[str, list]:
        """The parts of one health_read, read again when `window` changes what it covers."""
        if self._found is None or any(self._window[k] != v for k, v in window.items()):
            self._window.update(window)
            found: dict[str, list] = {"count": [], "page": [], "dead": [], "late": []}
            for part, _, *values in self.fetch("health_read", **self._window):
                if part == "count":
                    found[part].append(values[:5])
                else:
                    found[part].append(_job_row(values[5:]))
            self._found = found
        return self._found

    def counts(self, query: str | None = None) -> tuple[dict[str, int], dict[str, int]]:
        """(jobs by state, jobs by state whose job or connector name contains `query`, the
        window's when None, and of the window's connector), in STATES order, states without jobs
        left out."""
        window = {} if query is None else {"q": _needle(query)}
        found = {state: (n, m) for state, n, m, _, _ in self._read(**window)["count"]}
        everyone = {s: found[s][0] for s in STATES if s in found}
        matching = {s: found[s][1] for s in STATES if s in found and found[s][1]}
        return everyone, matching

    def alert_counts(self) -> tuple[int, int]:
        """(jobs with dead batches, jobs with a late watermark), whatever the window."""
        rows = self._read()["count"]
        return sum(row[3] for row in rows), sum(row[4] for row in rows)

    def page(
        self, *, query: str = "", connector: str = "", state: str = "", limit: int, offset: int
    ) -> list[JobRow]:
        """The jobs whose job or connector name contains `query`, of the connector named
        `connector` and of `state` (any when empty), those that need a person first (STATES
        order), then by name: [offset, offset + limit)."""
        window = {"q": _needle(query), "connector": connector, "state": state, "offset": offset}
        if self._found is None or self._window["limit"] < limit:
            window["limit"] = limit
        return self._read(**window)["page"][:limit]

    def alerts(
        self, *, limit: int | None, offset: int, reaper: int
    ) -> tuple[list[JobRow], list[JobRow]]:
        """(jobs with dead batches, jobs with a late watermark), each by name: the slices of the
        alert list [offset, offset + limit) (all when limit is None) that fall in either, the
        reaper's alert (`reaper`: 1 when it is active) coming between them."""
        # the reaper's alert moves the late slice only when the list's slice starts past 0
        window = {"alert_offset": offset, **({"reaper": reaper} if offset else {})}
        cached = self._window["alert_limit"]
        if self._found is None or not (cached is None or (limit is not None and limit <= cached)):
            window["alert_limit"] = limit
        found = self._read(**window)
        return found["dead"][:limit], found["late"][:limit]

    def of(self, job_ids: list[int]) -> dict[int, tuple[str, selectors.Lag | None]]:
        """Job id -> (state, lag) of these jobs only (dashboard.sql: health_of)."""
        if not job_ids:
            return {}
        found = {}
        for pk, state, items, weight in self.fetch("health_of", ids=list(job_ids)):
            lag = None if items is None else selectors.Lag(int(items), int(weight or 0))
            found[pk] = (state, lag)
        return found

    def rows(self) -> list[JobRow]:
        """Every job, by name, with its blocker when that is a dead batch and its open batches by
        kind and status (the graph page; /metrics reads dashboard.sql: health_metrics, one lean
        row per job, without these objects). The connector carries no weight unit, and the
        watermark its value only when it is a datetime (dashboard.sql: health_all)."""
        rows = []
        for values in self.fetch("health_all"):
            row = _job_row(values[:22])
            if values[22] is not None:
                row.blocker = BatchRef(values[22], "dead")
            row.open_by_kind = values[23] or ()
            rows.append(row)
        return rows


def _needle(query: str) -> str:
    return query.strip().lower()


def _job_row(values) -> JobRow:
    (pk, name, paused, every, lease, wm_type_job, c_name, c_state, c_kind, c_config) = values[:10]
    (wm_type, wm_value, wm_position, wm_updated, queued, running, failed, dead) = values[10:18]
    lag_items, lag_weight, late, state = values[18:]
    row = JobRow(
        pk,
        name,
        paused,
        every,
        lease,
        wm_type_job,
        ConnectorRef(c_name, c_state, weight_unit(c_kind, json_value(c_config))),
        WatermarkRow(wm_type, json_value(wm_value), wm_position, wm_updated),
        n_queued=queued,
        n_running=running,
        n_failed=failed,
        n_dead=dead,
        lag=None if lag_items is None else selectors.Lag(int(lag_items), int(lag_weight or 0)),
        late=late,
        state=state,
    )
    row.time_lag = time_lag(row)
    return row


def blockers_of(job_ids: list[int]) -> dict[int, BatchRef]:
    """Job id -> the batch its watermark waits for (see selectors.job_blocker), of these jobs."""
    if not job_ids:
        return {}
    found = selectors.jobs_blockers(job_ids)
    return {job: BatchRef(batch, status) for job, (batch, status) in found.items()}


def add_blockers(rows: list[JobRow]) -> None:
    """Set the batch each row's watermark waits for, for these rows."""
    found = blockers_of([row.id for row in rows])
    for row in rows:
        row.blocker = found.get(row.id)


def job_rows() -> list[JobRow]:
    """Every job with its connector, watermark, open batch counts, lag, state, lateness and (when
    its watermark waits for a dead batch) blocker, ordered by name."""
    return Health().rows()


def rows_detail(rows: list[JobRow]) -> None:
    """Add the blocker, the last batch, the last day's rates and the ETA to one page's rows."""
    ids = [row.id for row in rows]
    add_blockers(rows)
    last = last_batches(ids)
    rates = jobs_rates(job_ids=ids)
    for row in rows:
        row.last_batch = last.get(row.id)
        row.rates = rates.get(row.id) or JobRates()
        row.eta = eta(row.lag.items if row.lag else None, rates.get(row.id))


def time_lag(job) -> timedelta | None:
    """For a datetime watermark: how far its source time is behind now."""
    if job.watermark_type != WatermarkType.DATETIME or not job.watermark.value:
        return None
    value = job.watermark.value
    moment = parse_datetime(value) if isinstance(value, str) else None
    if moment is None:
        return None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.utc)
    return max(timezone.now() - moment, timedelta(0))


def eta(lag_items: int | None, rates: JobRates | None) -> timedelta | None:
    """When the lag would be worked off at the last hour's commit rate (None: no recent commit)."""
    if not lag_items:
        return timedelta(0) if lag_items == 0 else None
    if rates is None or rates.items_per_second <= 0:
        return None
    return timedelta(seconds=round(lag_items / rates.items_per_second))
