"""Reads for "is my data current, and if not, why": last batches, last-day rates, ETAs, alerts.

Every function here runs a fixed number of set-based queries whatever the number of jobs or
batches (the overview, /api/v1/alerts/ and /metrics call them on every refresh).
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from inventory import selectors
from inventory.models import (
    Backfill,
    Connector,
    ConnectorState,
    Job,
    WatermarkType,
)

HOURS = 24  # the sparklines' window, one bucket per hour
STALLED_AFTER = timedelta(minutes=10)  # a running backfill with nothing finished for this long
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
    """Per-hour counts over the last day, oldest bucket first (index HOURS-1 = the last hour)."""

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

    @property
    def items_per_second(self) -> float:
        """The recent commit rate: items committed in the last hour."""
        return self.items[-1] / 3600

    @property
    def weight_per_second(self) -> float:
        """Weight committed per second over the last day's busy hours (for estimates)."""
        busy = [w for w in self.weight if w]
        return sum(busy) / (3600 * len(busy)) if busy else 0.0


def last_batches() -> dict[int, LastBatch]:
    """Job id -> its newest batch (index batch_job_recent_idx, one probe per job)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT j.id, b.id, b.kind, b.status, b.finished_at FROM inventory_job AS j "
            "JOIN LATERAL (SELECT id, kind, status, finished_at FROM inventory_batch "
            "WHERE job_id = j.id ORDER BY id DESC LIMIT 1) AS b ON true"
        )
        return {row[0]: LastBatch(*row[1:]) for row in cursor.fetchall()}


def jobs_rates(job_id: int | None = None) -> dict[int, JobRates]:
    """Job id -> attempts finished per hour over the last day (index attempt_finished_idx),
    with the items and weight of the succeeded ones."""
    where, params = "", [HOURS]
    if job_id is not None:
        where, params = " AND b.job_id = %s", [HOURS, job_id]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT b.job_id, "
            "floor(extract(epoch FROM statement_timestamp() - a.finished_at) / 3600)::int AS age, "
            "a.outcome, count(*), sum(b.item_count), sum(b.weight) "
            # a lookup by primary key per recent attempt, not a join over every batch
            "FROM inventory_batchattempt AS a CROSS JOIN LATERAL (SELECT job_id, item_count, "
            "weight FROM inventory_batch WHERE id = a.batch_id OFFSET 0) AS b "
            "WHERE a.finished_at >= statement_timestamp() - make_interval(hours => %s)"
            f"{where} GROUP BY 1, 2, 3",
            params,
        )
        rows = cursor.fetchall()
    rates: dict[int, JobRates] = {}
    for job, age, outcome, n, items, weight in rows:
        if not 0 <= age < HOURS:
            continue
        rate = rates.setdefault(job, JobRates())
        slot = HOURS - 1 - age
        if outcome == "succeeded":
            rate.succeeded[slot] += n
            rate.items[slot] += int(items)
            rate.weight[slot] += int(weight)
        elif outcome:
            rate.failed[slot] += n
    return rates


def time_lag(job: Job) -> timedelta | None:
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


def overview() -> list[Job]:
    """The overview's rows: jobs_overview plus last batch, last-day rates, time lag and ETA."""
    jobs = selectors.jobs_overview()
    last = last_batches()
    rates = jobs_rates()
    for job in jobs:
        job.last_batch = last.get(job.pk)
        job.rates = rates.get(job.pk) or JobRates()
        job.time_lag = time_lag(job)
        job.eta = eta(job.lag.items if job.lag else None, rates.get(job.pk))
        job.late = watermark_late(job)
    return jobs


def watermark_late(job: Job) -> timedelta | None:
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


@dataclass
class Alert:
    kind: str  # dead_batches, watermark_late, connector_waiting, reaper_overdue, backfill_stalled
    subject: str  # the job, connector or backfill it is about ("" for the reaper)
    message: str
    url: str
    severity: str = "warning"

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "severity": self.severity,
            "message": self.message,
            "url": self.url,
        }


ALERT_KINDS = (
    "dead_batches",
    "watermark_late",
    "connector_waiting",
    "reaper_overdue",
    "backfill_stalled",
)


def stalled_backfills() -> list[tuple[Backfill, str]]:
    """Running backfills that make no progress: work left and nothing finished for
    STALLED_AFTER, or nothing left but dead batches (they need a retry or a skip)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT f.id,
                   count(*) FILTER (WHERE b.status IN ('queued', 'running', 'failed')),
                   count(*) FILTER (WHERE b.status = 'dead'),
                   greatest(max(b.finished_at), f.updated_at) < statement_timestamp() - %s
            FROM inventory_backfill AS f JOIN inventory_batch AS b ON b.backfill_id = f.id
            WHERE f.status = 'running' GROUP BY f.id
            """,
            [STALLED_AFTER],
        )
        rows = cursor.fetchall()
    reasons = {}
    for pk, open_, dead, idle in rows:
        if dead and not open_:
            reasons[pk] = f"{dead} dead batch(es) hold it: retry or skip them"
        elif open_ and idle:
            minutes = int(STALLED_AFTER.total_seconds() // 60)
            reasons[pk] = f"no batch finished for {minutes} min with {open_} left"
    found = Backfill.objects.select_related("job").in_bulk(list(reasons))
    return [(found[pk], reason) for pk, reason in sorted(reasons.items()) if pk in found]


def alerts(jobs: list[Job] | None = None) -> list[Alert]:
    """Everything that needs a person now. `jobs` may be the overview rows already read."""
    jobs = overview() if jobs is None else jobs
    found: list[Alert] = []
    for job in jobs:
        url = reverse("dashboard:job", args=[job.name])
        if job.n_dead:
            held = job.blocker is not None and job.blocker.status == "dead"
            found.append(
                Alert(
                    "dead_batches",
                    job.name,
                    f"{job.name}: {job.n_dead} dead batch(es)"
                    + (f"; the watermark waits for batch {job.blocker.pk}" if held else ""),
                    reverse("dashboard:batch", args=[job.blocker.pk]) if held else url,
                    severity="critical",
                )
            )
        if job.late:
            found.append(
                Alert(
                    "watermark_late",
                    job.name,
                    f"{job.name}: watermark has not moved for {_human(job.late)} "
                    f"(schedule every {job.schedule_seconds} s) with {job.lag.items} items waiting",
                    url,
                )
            )
    for connector in Connector.objects.filter(state=ConnectorState.WAITING).order_by("name"):
        found.append(
            Alert(
                "connector_waiting",
                connector.name,
                f"connector {connector.name} waits for {connector.start_after or '?'} to complete",
                reverse("dashboard:connectors"),
                severity="info",
            )
        )
    reaper = selectors.reaper_status()
    if reaper.overdue:
        found.append(
            Alert(
                "reaper_overdue",
                "",
                "the lease reaper has never run"
                if reaper.last_run_at is None
                else f"the lease reaper last ran {int(reaper.age_seconds)} s ago",
                reverse("dashboard:overview"),
                severity="critical",
            )
        )
    for backfill, reason in stalled_backfills():
        found.append(
            Alert(
                "backfill_stalled",
                str(backfill.pk),
                f"backfill {backfill.pk} of {backfill.job.name}: {reason}",
                reverse("dashboard:backfills") + f"#backfill-{backfill.pk}",
            )
        )
    return found


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def attempt_counts() -> list[tuple[int, str, int]]:
    """(job id, outcome ("" = still running or abandoned), attempts) over every attempt: the
    rollup plus the attempts after its boundary (services/metrics_rollup.py)."""
    from inventory.services.metrics_rollup import ROLLUP

    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH boundary AS (
                SELECT coalesce((SELECT (outcome->>'below_id')::bigint
                                 FROM inventory_maintenancerun WHERE name = %s), 0) AS id
            )
            SELECT job_id, outcome, sum(n)::bigint FROM (
                SELECT job_id, outcome, count AS n FROM inventory_attemptrollup
                UNION ALL
                SELECT b.job_id, a.outcome, count(*) FROM inventory_batchattempt AS a
                JOIN inventory_batch AS b ON b.id = a.batch_id
                WHERE a.id >= (SELECT id FROM boundary) GROUP BY b.job_id, a.outcome
            ) AS counts GROUP BY job_id, outcome
            """,
            [ROLLUP],
        )
        return cursor.fetchall()
