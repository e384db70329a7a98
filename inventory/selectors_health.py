"""Reads for "is my data current, and if not, why": last batches, last-day rates, ETAs (alerts:
selectors_alerts.py).

Every function here runs a fixed number of set-based queries whatever the number of jobs or
batches (the overview, /api/v1/alerts/ and /metrics call them on every refresh).
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from inventory import selectors
from inventory.models import (
    ConnectorState,
    Job,
    WatermarkType,
    weight_unit,
)

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

    @property
    def weight_per_second(self) -> float:
        """Weight committed per second over the last day's busy hours (for estimates)."""
        busy = [w for w in self.weight if w]
        return sum(busy) / (3600 * len(busy)) if busy else 0.0


def last_batches(job_ids: list[int]) -> dict[int, LastBatch]:
    """Job id -> its newest batch (index batch_job_recent_idx, one probe per job)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT j.id, b.id, b.kind, b.status, b.finished_at FROM unnest(%s::bigint[]) AS j(id) "
            "JOIN LATERAL (SELECT id, kind, status, finished_at FROM inventory_batch "
            "WHERE job_id = j.id ORDER BY id DESC LIMIT 1) AS b ON true",
            [list(job_ids)],
        )
        return {row[0]: LastBatch(*row[1:]) for row in cursor.fetchall()}


def jobs_rates(
    job_id: int | None = None, *, job_ids: list[int] | None = None
) -> dict[int, JobRates]:
    """Job id -> attempts finished per UTC clock hour over the last day (the current hour last),
    with the items and weight of the succeeded ones; of one job, of `job_ids`, or of all.

    Read from the rollup the commit and failure transactions keep (models.JobHourlyRates, a
    trigger in sql/schema/rates.sql): at most HOURS rows per job (its unique index), never the
    day's batches or attempts."""
    ids = [job_id] if job_id is not None else job_ids
    where = "" if ids is None else "job_id = ANY(%(ids)s) AND "
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, (extract(epoch FROM date_trunc('hour', statement_timestamp(), 'UTC') "
            "- hour) / 3600)::int, succeeded, failed, items, weight, "
            "extract(epoch FROM statement_timestamp() - date_trunc('hour', statement_timestamp(), "
            "'UTC')) / 3600 FROM inventory_jobhourlyrates "
            f"WHERE {where}hour > date_trunc('hour', statement_timestamp(), 'UTC') "
            "- make_interval(hours => %(hours)s)",
            {"ids": list(ids) if ids is not None else None, "hours": HOURS},
        )
        rows = cursor.fetchall()
    rates: dict[int, JobRates] = {}
    for job, age, succeeded, failed, items, weight, elapsed in rows:
        if not 0 <= age < HOURS:
            continue
        rate = rates.setdefault(job, JobRates())
        rate.elapsed = float(elapsed)
        slot = HOURS - 1 - age
        rate.succeeded[slot] += succeeded
        rate.failed[slot] += failed
        rate.items[slot] += int(items)
        rate.weight[slot] += int(weight)
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
    """One job as the overview, the alerts and /metrics read it: plain values from SQL rows,
    no model instances (building 1,000 Job, Connector, Watermark and Batch objects per request
    cost more than every query of the page together)."""

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
    blocker: BatchRef | None = None
    time_lag: timedelta | None = None
    late: timedelta | None = None
    # the page's rows only (see overview_page)
    last_batch: LastBatch | None = None
    rates: JobRates | None = None
    eta: timedelta | None = None

    @property
    def pk(self) -> int:
        return self.id

    @property
    def state(self) -> str:
        """What the overview says about the job, worst first in STATES."""
        if self.paused:
            return "paused"
        if self.connector.state != ConnectorState.ACTIVE:
            return "connector"
        if self.n_dead:
            return "blocked"
        if self.late:
            return "late"
        if self.n_failed:
            return "failing"
        if self.lag is None:
            return "unreadable"
        if self.lag.items:
            return "catching_up"
        return "current"


# the overview's order: the jobs that need a person first
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


def job_rows() -> list[JobRow]:
    """Every job with its connector, watermark, open batch counts, lag, blocker, time lag and
    lateness, ordered by name, in a fixed number of queries (plus one lag query per job reading
    an external meta table: each reads its own table)."""
    fields = (
        "id",
        "name",
        "paused",
        "schedule_seconds",
        "lease_seconds",
        "watermark_type",
        "connector__name",
        "connector__state",
        "connector__kind",
        "connector__config",
        "watermark__type",
        "watermark__value",
        "watermark__position",
        "watermark__updated_at",
    )
    rows = []
    for values in Job.objects.order_by("name").values_list(*fields):
        (pk, name, paused, every, lease, wm_type, c_name, c_state, c_kind, c_config, *wm) = values
        rows.append(
            JobRow(
                pk,
                name,
                paused,
                every,
                lease,
                wm_type,
                ConnectorRef(c_name, c_state, weight_unit(c_kind, c_config)),
                WatermarkRow(*wm),
            )
        )
    counts = selectors.open_batch_counts()
    lags = selectors.jobs_lag_by_id([row.id for row in rows])
    blockers = selectors.jobs_blockers()
    for row in rows:
        row.n_queued = counts.get((row.id, "queued"), 0)
        row.n_running = counts.get((row.id, "running"), 0)
        row.n_failed = counts.get((row.id, "failed"), 0)
        row.n_dead = counts.get((row.id, "dead"), 0)
        row.lag = lags.get(row.id)
        blocker = blockers.get(row.id)
        row.blocker = BatchRef(*blocker) if blocker else None
        row.time_lag = time_lag(row)
        row.late = watermark_late(row)
    return rows


def rows_filter(rows: list[JobRow], *, query: str = "", state: str = "") -> list[JobRow]:
    """The rows whose job or connector name contains `query` and whose state is `state` (any
    when empty), jobs that need a person first (STATES order), then by name."""
    query = query.strip().lower()
    if query:
        rows = [r for r in rows if query in r.name.lower() or query in r.connector.name.lower()]
    if state:
        rows = [r for r in rows if r.state == state]
    rank = {name: i for i, name in enumerate(STATES)}
    return sorted(rows, key=lambda r: rank[r.state])  # stable: by name within a state


def rows_detail(rows: list[JobRow]) -> None:
    """Add the last batch, the last day's rates and the ETA to the rows shown on one page."""
    ids = [row.id for row in rows]
    last = last_batches(ids)
    rates = jobs_rates(job_ids=ids)
    for row in rows:
        row.last_batch = last.get(row.id)
        row.rates = rates.get(row.id) or JobRates()
        row.eta = eta(row.lag.items if row.lag else None, rates.get(row.id))


def state_counts(rows: list[JobRow]) -> dict[str, int]:
    counts = dict.fromkeys(STATES, 0)
    for row in rows:
        counts[row.state] += 1
    return {state: n for state, n in counts.items() if n}


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


def watermark_late(job) -> timedelta | None:
    """How long the watermark has sat still beyond what its schedule allows, when items wait.

    A job on an interval schedule should move at least every few intervals while it has lag; a
    job without a schedule (or on a cron schedule) or with nothing to do is never late."""
    if job.paused or not job.schedule_seconds or not job.lag or not job.lag.items:
        return None
    if job.connector.state != ConnectorState.ACTIVE:
        return None
    allowed = timedelta(seconds=STALE_INTERVALS * job.schedule_seconds + job.lease_seconds)
    still = timezone.now() - job.watermark.updated_at
    return still if still > allowed else None
