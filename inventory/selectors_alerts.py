"""Alerts: dead batches, late watermarks, waiting connectors, an overdue reaper, stalled backfills;
and the attempts counted for /metrics.

Every function here runs a fixed number of set-based queries whatever the number of jobs or
batches (the overview, /api/v1/alerts/ and /metrics call them on every refresh).
"""

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.db import connection
from django.urls import reverse

from inventory import selectors
from inventory.links import link
from inventory.models import (
    Backfill,
    Connector,
    ConnectorState,
)
from inventory.selectors_health import JobRow, job_rows
from inventory.templatetags.human import duration

STALLED_AFTER = timedelta(minutes=10)  # a running backfill with nothing finished for this long


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


def alerts(jobs: list[JobRow] | None = None) -> list[Alert]:
    """Everything that needs a person now. `jobs` may be the rows already read (job_rows)."""
    jobs = job_rows() if jobs is None else jobs
    # alerts name up to two URLs per job: one reverse per URL name (inventory/links.py)
    job_url = partial(link, "dashboard:job")
    batch_url = partial(link, "dashboard:batch")
    found: list[Alert] = []
    for job in jobs:
        if job.n_dead:
            held = job.blocker is not None and job.blocker.status == "dead"
            found.append(
                Alert(
                    "dead_batches",
                    job.name,
                    f"{job.name}: {job.n_dead} dead batch(es)"
                    + (f"; the watermark waits for batch {job.blocker.id}" if held else ""),
                    batch_url(job.blocker.id) if held else job_url(job.name),
                    severity="critical",
                )
            )
        if job.late:
            found.append(
                Alert(
                    "watermark_late",
                    job.name,
                    f"{job.name}: watermark has not moved for {duration(job.late)} "
                    f"(schedule every {job.schedule_seconds} s) with {job.lag.items} items waiting",
                    job_url(job.name),
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


def attempt_counts() -> list[tuple[int, str, int]]:
    """(job id, outcome, attempts): outcome "" counts every attempt started, the others the
    attempts finished with that outcome. The rollup plus the attempts at or after its boundaries
    (services/metrics_rollup.py): those inserted or finished in the last minutes.

    The rollup and its boundaries are read by one statement (one snapshot: a roller committing
    in between cannot make a segment count twice); the attempts after them by a second, with the
    boundaries as values so that the planner sees how few rows they select (an id range on the
    primary key, a finish-time range on attempt_finished_idx)."""
    from inventory.services.metrics_rollup import BOUNDARIES_SQL, ROLLUP

    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH boundary AS ({BOUNDARIES_SQL})
            SELECT m.*, r.job_id, r.outcome, r.count FROM (SELECT 1) AS one
            LEFT JOIN boundary AS m ON true
            LEFT JOIN inventory_attemptrollup AS r ON m.finished_before IS NOT NULL
            """,
            [ROLLUP],
        )
        rows = cursor.fetchall()
        below_id, finished_before = rows[0][:2]
        if finished_before is None:  # no rollup (or one of the old kind, which is not read)
            below_id, finished_before = 0, "-infinity"
        counts = {(job, outcome): n for *_, job, outcome, n in rows if job is not None}
        cursor.execute(
            """
            SELECT b.job_id, counted.outcome, count(*) FROM (
                SELECT batch_id, '' AS outcome FROM inventory_batchattempt WHERE id >= %s
                UNION ALL
                SELECT batch_id, outcome FROM inventory_batchattempt
                WHERE finished_at >= %s::timestamptz AND outcome <> ''
            ) AS counted JOIN inventory_batch AS b ON b.id = counted.batch_id
            GROUP BY b.job_id, counted.outcome
            """,
            [below_id, finished_before],
        )
        for job, outcome, n in cursor.fetchall():
            counts[job, outcome] = counts.get((job, outcome), 0) + n
    return [(job, outcome, n) for (job, outcome), n in counts.items()]
