"""Alerts: dead batches, late watermarks, jobs that retention will overtake soon, waiting
connectors, an overdue reaper, stalled backfills, jobs whose schedule beat cannot compute; and the
attempts counted for /metrics.

Every function here runs a fixed number of set-based queries whatever the number of jobs or
batches (the overview, /api/v1/alerts/ and /metrics call them on every refresh).
"""

from dataclasses import dataclass
from datetime import timedelta

from django.urls import reverse

from inventory import selectors, selectors_health
from inventory.links import link
from inventory.models import Backfill, Job
from inventory.selectors_health import BatchRef
from inventory.services.retention_forecast import at_risk_rows
from inventory.services.scheduling import unschedulable_jobs
from inventory.sql import gateway
from inventory.templatetags.human import duration

STALLED_AFTER = timedelta(minutes=10)  # a running backfill with nothing finished for this long


@dataclass
class Alert:
    kind: str  # one of ALERT_KINDS
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
    "schedule_invalid",
    "watermark_late",
    "retention_breach",
    "connector_waiting",
    "reaper_overdue",
    "backfill_stalled",
)
SEVERITY = {
    "dead_batches": "critical",
    "schedule_invalid": "critical",
    "watermark_late": "warning",
    "retention_breach": "warning",
    "connector_waiting": "info",
    "reaper_overdue": "critical",
    "backfill_stalled": "warning",
}


def stalled_backfills() -> list[tuple[Backfill, str]]:
    """Running backfills that make no progress: work left and nothing finished for
    STALLED_AFTER, or nothing left but dead batches (they need a retry or a skip)."""
    reasons = {}
    for row in gateway.stalled_backfills(after=STALLED_AFTER):
        if row.dead and not row.open:
            reasons[row.backfill_id] = f"{row.dead} dead batch(es) hold it: retry or skip them"
        elif row.open and row.idle:
            minutes = int(STALLED_AFTER.total_seconds() // 60)
            reasons[row.backfill_id] = f"no batch finished for {minutes} min with {row.open} left"
    found = Backfill.objects.select_related("job").in_bulk(list(reasons))
    return [(found[pk], reason) for pk, reason in sorted(reasons.items()) if pk in found]


@dataclass
class AlertsPage:
    count: int  # every active alert
    by_kind: dict[str, int]  # every active alert by kind, in the order alerts come
    alerts: list[Alert]  # the slice asked for


def _dead_alert(name: str, n_dead: int, blocker: BatchRef | None) -> Alert:
    held = blocker is not None and blocker.status == "dead"
    return Alert(
        "dead_batches",
        name,
        f"{name}: {n_dead} dead batch(es)"
        + (f"; the watermark waits for batch {blocker.id}" if held else ""),
        link("dashboard:batch", blocker.id) if held else link("dashboard:job", name),
        severity=SEVERITY["dead_batches"],
    )


def _late_alert(name: str, late, schedule_seconds: int, items: int) -> Alert:
    return Alert(
        "watermark_late",
        name,
        f"{name}: watermark has not moved for {duration(late)} "
        f"(schedule every {schedule_seconds} s) with {items} items waiting",
        link("dashboard:job", name),
        severity=SEVERITY["watermark_late"],
    )


def alerts_page(*, limit: int | None = None, offset: int = 0, health=None, rows=None) -> AlertsPage:
    """Everything that needs a person now, the critical first (jobs with dead batches by name,
    the overdue reaper, jobs beat cannot schedule), then the warnings (late watermarks by job name, stalled backfills), then
    the connectors waiting on another: the slice [offset, offset + limit) (all when limit is
    None), with the count of every alert by kind.

    The job alerts come from the counts and slices of one read of dashboard.sql's job_health
    (health_read; the same rule as the overview's states, and the same read as the overview's
    page when `health` is the overview's): only the alerts of the slice are built. `rows`: every
    job's row already read (Health.rows, by name, with blockers), to build the job alerts from
    ([]: only the alerts that are not about a job)."""
    health = health or selectors_health.Health()
    reaper = selectors.reaper_status()
    if rows is not None:
        dead_rows = [row for row in rows if row.n_dead]
        late_rows = [row for row in rows if row.late is not None]
        n_dead, n_late = len(dead_rows), len(late_rows)
    else:
        # the slices health_read returns: they start where this list's slice meets them
        dead_rows, late_rows = health.alerts(limit=limit, offset=offset, reaper=int(reaper.overdue))
        n_dead, n_late = health.alert_counts()
    stalled = stalled_backfills()
    # few rows: the forecasts inside TIDEMARK_RETENTION_WARN_SECONDS (beat's last refresh)
    breaching = list(at_risk_rows())
    unschedulable = sorted(unschedulable_jobs().items())
    n_waiting = gateway.waiting_connectors_count()

    def dead(lim, off):
        if rows is not None:  # with their blockers already
            chosen = dead_rows[off : off + lim]
        else:
            chosen = dead_rows[:lim]
            selectors_health.add_blockers(chosen)
        return [_dead_alert(r.name, r.n_dead, r.blocker) for r in chosen]

    def late(lim, off):
        chosen = late_rows[off : off + lim] if rows is not None else late_rows[:lim]
        return [_late_alert(r.name, r.late, r.schedule_seconds, r.lag.items) for r in chosen]

    def reaper_alert(lim, off):
        message = (
            "the lease reaper has never run"
            if reaper.last_run_at is None
            else f"the lease reaper last ran {int(reaper.age_seconds)} s ago"
        )
        alert = Alert(
            "reaper_overdue", "", message, reverse("dashboard:overview"), SEVERITY["reaper_overdue"]
        )
        return [alert][off : off + lim]

    def schedule_alerts(lim, off):
        return [
            Alert(
                "schedule_invalid",
                name,
                f"{name}: not scheduled, celery beat cannot compute its schedule_cron: {reason}",
                link("dashboard:job", name),
                severity=SEVERITY["schedule_invalid"],
            )
            for name, reason in unschedulable[off : off + lim]
        ]

    def retention_alerts(lim, off):
        return [
            Alert(
                "retention_breach",
                row.job.name,
                f"{row.job.name}: {row.message}",
                link("dashboard:job", row.job.name) + "#retention",
                severity=SEVERITY["retention_breach"],
            )
            for row in breaching[off : off + lim]
        ]

    def stalled_alerts(lim, off):
        return [
            Alert(
                "backfill_stalled",
                str(backfill.pk),
                f"backfill {backfill.pk} of {backfill.job.name}: {reason}",
                reverse("dashboard:backfills") + f"#backfill-{backfill.pk}",
                severity=SEVERITY["backfill_stalled"],
            )
            for backfill, reason in stalled[off : off + lim]
        ]

    def waiting(lim, off):
        rows = gateway.waiting_connectors(limit=lim, offset=off)
        return [
            Alert(
                "connector_waiting",
                name,
                f"connector {name} waits for {start_after or '?'} to complete"
                if named
                else f"connector {name} waits for {start_after!r}, which names no connector or "
                "label: it will never start; change its start_after",
                reverse("dashboard:connectors"),
                severity=SEVERITY["connector_waiting"],
            )
            for name, start_after, named in rows
        ]

    segments = (
        ("dead_batches", n_dead, dead),
        ("reaper_overdue", int(reaper.overdue), reaper_alert),
        ("schedule_invalid", len(unschedulable), schedule_alerts),
        ("watermark_late", n_late, late),
        ("retention_breach", len(breaching), retention_alerts),
        ("backfill_stalled", len(stalled), stalled_alerts),
        ("connector_waiting", n_waiting, waiting),
    )
    total = sum(n for _, n, _ in segments)
    end = total if limit is None else min(offset + limit, total)
    found: list[Alert] = []
    first = 0  # where the segment starts in the whole list
    for _, n, read in segments:
        lo, hi = max(offset, first), min(end, first + n)
        if lo < hi:
            found.extend(read(hi - lo, lo - first))
        first += n
    return AlertsPage(total, {kind: n for kind, n, _ in segments}, found)


def alerts() -> list[Alert]:
    """Every active alert, in alerts_page's order."""
    return alerts_page().alerts


def alert_labels(rows: list) -> list[tuple[str, str, str]]:
    """(kind, subject, severity) of every active alert, in alerts_page's order, the job alerts
    from `rows` (every job's row, Health.rows): what /metrics says of each alert, without building
    the message and the link of one alert per job."""
    return job_alert_labels(
        [r.name for r in rows if r.n_dead], [r.name for r in rows if r.late is not None]
    )


def job_alert_labels(dead: list[str], late: list[str]) -> list[tuple[str, str, str]]:
    """alert_labels from the names of the jobs with dead batches and of those with a late
    watermark, each by name."""
    others = [(a.kind, a.subject, a.severity) for a in alerts_page(rows=[]).alerts]
    reaper = [label for label in others if label[0] in ("reaper_overdue", "schedule_invalid")]
    rest = [label for label in others if label[0] not in ("reaper_overdue", "schedule_invalid")]
    return (
        [("dead_batches", name, SEVERITY["dead_batches"]) for name in dead]
        + reaper
        + [("watermark_late", name, SEVERITY["watermark_late"]) for name in late]
        + rest
    )


def job_names() -> dict[int, str]:
    """Job id -> name, of every job."""
    return dict(Job.objects.values_list("id", "name"))


def attempt_counts() -> list[tuple[int, str, int]]:
    """(job id, outcome, attempts): outcome "" counts every attempt started, the others the
    attempts finished with that outcome. The rollup plus the attempts at or after its boundaries
    (services/metrics_rollup.py): those inserted or finished in the last minutes.

    The rollup and its boundaries are read by one statement (one snapshot: a roller committing
    in between cannot make a segment count twice), the boundaries as a row of their own (not
    repeated on each of the rollup's rows: 30,000 at 10,000 jobs, each a timestamp to convert); the
    attempts after them by a second, with the boundaries as values so that the planner sees how
    few rows they select (an id range on the primary key, a finish-time range on
    attempt_finished_idx)."""
    from inventory.services.metrics_rollup import ROLLUP

    return gateway.attempt_counts(rollup=ROLLUP)


def attempt_totals() -> list[tuple[str, int]]:
    """(outcome, attempts) of all jobs, as attempt_counts counts them per job (outcome "": every
    attempt started), summed by the database: a row per outcome, not per job and outcome. Every
    rollup row and attempt is of a job that exists (their foreign keys: a job's are deleted
    with it), so neither is joined to the jobs."""
    from inventory.services.metrics_rollup import ROLLUP

    return gateway.attempt_totals(rollup=ROLLUP)
