"""Periodic work, declared here and registered in django-celery-beat's tables.

`schedules_sync` makes the beat tables match the inventory: one `run_job` entry per scheduled job
(interval from `schedule_seconds`, or a crontab from `schedule_cron`; disabled while the job is
paused), one discovery entry per `files` connector that scans a directory, and the fixed steps
(lease reaper, retry requeue, backfill pacing, connector orchestration, and this sync itself, so
jobs created later get their schedule without anyone running a command). The fixed steps are sent
ahead of work (job runs and discovery carry `dispatch.WORK_PRIORITY`); a copy of a step that
waited in the broker while the step ran is skipped by the database's clock (`fixed_step_run`),
never by a worker's, whose clock may be wrong. Entries Tidemark created for jobs or connectors
that are gone are removed; entries made by hand are left alone.

A job whose stored `schedule_cron` celery cannot compute a next run for (`0 0 31 2 *`, stored
before the check on save, or written around it) gets no entry: beat would die on it, and with it
the reaper and discovery. The sync skips it, logs it and records it (`UNSCHEDULABLE`), which the
overview's alert strip, /api/v1/alerts/ and /metrics show as a `schedule_invalid` alert naming
the job until the job is changed.
"""

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from inventory.models import Connector, ConnectorState, Job, MaintenanceRun
from inventory.services import restatements
from inventory.services.config_keys import discover_seconds
from inventory.services.cron import parse_cron
from inventory.services.discovery import discover, discovers
from inventory.services.dispatch import (
    DISCOVER_ASSETS,
    RUN_JOB,
    WORK_PRIORITY,
    RunOutcome,
    batches_dispatch_due,
    job_run,
)
from inventory.services.errors import InvalidInput
from inventory.services.lifecycle import batches_reap_expired
from inventory.services.metrics_rollup import attempt_rollup_advance
from inventory.services.orchestration import orchestrate
from inventory.sql import query

PREFIX = "tidemark:"
JOB_PREFIX = f"{PREFIX}run-job:"
DISCOVER_PREFIX = f"{PREFIX}discover:"
T = TypeVar("T")

REAPER = f"{PREFIX}reap-leases"
REQUEUE = f"{PREFIX}requeue-due"
PACE_BACKFILLS = f"{PREFIX}pace-backfills"
RELEASE_CONNECTORS = f"{PREFIX}release-connectors"
SYNC_SCHEDULES = f"{PREFIX}sync-schedules"
# MaintenanceRun row: the jobs the last sync could not schedule, {job name: reason}
UNSCHEDULABLE = f"{PREFIX}unschedulable-jobs"

log = logging.getLogger(__name__)

# name -> (task, every seconds)
FIXED_STEPS = {
    REAPER: ("tidemark.reap_leases", 15),
    REQUEUE: ("tidemark.requeue_due", 5),
    PACE_BACKFILLS: ("tidemark.pace_backfills", 5),
    RELEASE_CONNECTORS: ("tidemark.release_connectors", 30),
    SYNC_SCHEDULES: ("tidemark.sync_schedules", 60),
}


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # job name -> why it has no entry

    def as_dict(self) -> dict:
        return asdict(self)


def _crontab_key(minute, hour, day_of_month, month_of_year, day_of_week, timezone) -> tuple:
    return (minute, hour, day_of_month, month_of_year, day_of_week, str(timezone))


class _Sync:
    """One sync's reads: every Tidemark entry and schedule is read once, so a sync with nothing
    to change costs a few statements whatever the number of jobs (it runs every minute), and
    only the entries that change are written."""

    def __init__(self):
        self.report = SyncReport()
        self.entries = {e.name: e for e in PeriodicTask.objects.filter(name__startswith=PREFIX)}
        self.intervals = {
            s.every: s
            for s in IntervalSchedule.objects.filter(period=IntervalSchedule.SECONDS).order_by(
                "-pk"
            )
        }
        self.crontabs = {
            _crontab_key(
                c.minute, c.hour, c.day_of_month, c.month_of_year, c.day_of_week, c.timezone
            ): c
            for c in CrontabSchedule.objects.order_by("-pk")
        }
        self.wanted: set[str] = set()
        self.parsed: dict[str, dict | InvalidInput] = {}

    def interval(self, seconds: int) -> IntervalSchedule:
        if seconds not in self.intervals:
            self.intervals[seconds], _ = IntervalSchedule.objects.get_or_create(
                every=seconds, period=IntervalSchedule.SECONDS
            )
        return self.intervals[seconds]

    def crontab(self, expression: str) -> CrontabSchedule:
        if expression not in self.parsed:  # once per expression, however many jobs share it
            try:
                self.parsed[expression] = parse_cron(expression)
            except InvalidInput as exc:
                self.parsed[expression] = exc
        fields = self.parsed[expression]
        if isinstance(fields, InvalidInput):
            raise fields
        key = _crontab_key(**fields, timezone="UTC")
        if key not in self.crontabs:
            self.crontabs[key], _ = CrontabSchedule.objects.get_or_create(**fields, timezone="UTC")
        return self.crontabs[key]

    def job_schedule(self, job: Job) -> dict | None:
        if job.schedule_cron:
            return {"crontab": self.crontab(job.schedule_cron)}
        if job.schedule_seconds:
            return {"interval": self.interval(job.schedule_seconds)}
        return None

    def upsert(
        self,
        *,
        name: str,
        task: str,
        args: list,
        enabled: bool,
        priority: int | None = None,
        expire_seconds: int | None = None,
        **schedule,
    ):
        self.wanted.add(name)
        interval, crontab = schedule.get("interval"), schedule.get("crontab")
        wanted = {
            "task": task,
            "args": json.dumps(args),
            "enabled": enabled,
            "interval_id": interval.pk if interval else None,
            "crontab_id": crontab.pk if crontab else None,
            "priority": priority,
            "expire_seconds": expire_seconds,
        }
        entry = self.entries.get(name)
        if entry is None:
            PeriodicTask.objects.create(name=name, **wanted)
            self.report.created.append(name)
            return
        changed = [key for key, value in wanted.items() if getattr(entry, key) != value]
        if changed:
            for key in changed:
                setattr(entry, key, wanted[key])
            # save() (not update()) so django-celery-beat notices the change and reloads
            entry.save()
            self.report.updated.append(name)

    def remove_stale(self):
        for name, entry in self.entries.items():
            if name not in self.wanted:
                self.report.removed.append(name)
                entry.delete()


@transaction.atomic
def schedules_sync() -> SyncReport:
    """Make django-celery-beat's entries match the jobs and connectors (idempotent)."""
    sync = _Sync()
    for name, (task, every) in FIXED_STEPS.items():
        # housekeeping: ahead of work (dispatch.WORK_PRIORITY). No expiry: Celery would compare
        # it, set by beat's clock, with the receiving worker's clock, and a worker whose clock
        # is ahead would discard every step, the reaper's too; stale copies are skipped by
        # fixed_step_run instead. Entries synced with an expiry before are updated.
        sync.upsert(
            name=name,
            task=task,
            args=[],
            enabled=True,
            interval=sync.interval(every),
            expire_seconds=None,
        )

    scheduled = Job.objects.filter(Q(schedule_seconds__gt=0) | ~Q(schedule_cron="")).only(
        "pk", "name", "paused", "schedule_seconds", "schedule_cron"
    )
    for job in scheduled.order_by("pk"):
        try:
            schedule = sync.job_schedule(job)
        except InvalidInput as exc:
            # never an entry beat cannot compute: its entry (if any) goes with remove_stale
            log.error("job %s has no schedule: %s", job.name, exc.message)
            sync.report.skipped[job.name] = exc.message
            continue
        if schedule is None:
            continue
        sync.upsert(
            name=f"{JOB_PREFIX}{job.name}",
            task=RUN_JOB,
            args=[job.pk],
            enabled=not job.paused,
            priority=WORK_PRIORITY,
            **schedule,
        )

    for connector in Connector.objects.order_by("pk"):
        if not discovers(connector):
            continue
        every = discover_seconds(connector.config)
        sync.upsert(
            name=f"{DISCOVER_PREFIX}{connector.name}",
            task=DISCOVER_ASSETS,
            args=[connector.pk],
            enabled=connector.state != ConnectorState.COMPLETED,
            priority=WORK_PRIORITY,
            interval=sync.interval(max(every, 1)),
        )

    sync.remove_stale()
    _unschedulable_record(sync.report.skipped)
    return sync.report


def _unschedulable_record(skipped: dict[str, str]) -> None:
    """Keep the jobs this sync skipped for the alerts (one row; written only when it changes)."""
    row = MaintenanceRun.objects.filter(name=UNSCHEDULABLE).first()
    if row is not None and row.outcome.get("jobs") == skipped:
        return
    MaintenanceRun.objects.update_or_create(
        name=UNSCHEDULABLE, defaults={"last_run_at": Now(), "outcome": {"jobs": skipped}}
    )


def unschedulable_jobs() -> dict[str, str]:
    """{job name: reason} of the jobs the last schedule sync could not give a beat entry."""
    row = MaintenanceRun.objects.filter(name=UNSCHEDULABLE).only("outcome").first()
    return dict(row.outcome.get("jobs", {})) if row is not None else {}


def job_run_now(*, job: Job) -> RunOutcome:
    """An operator's "run now": discover the connector's new files first, then plan and enqueue,
    so files that landed since the last discovery timer are in this run. A failed discovery
    (directory gone) does not stop the run of what is registered; `reason` names it."""
    connector = job.connector
    discovery_error = ""
    if discovers(connector):
        try:
            discover(connector)
        except InvalidInput as exc:
            # the items registered before are still worth running; say why nothing new came
            discovery_error = f"discovery failed: {exc}"
    outcome = job_run(job=job)
    if discovery_error:
        outcome.reason = "; ".join(part for part in (outcome.reason, discovery_error) if part)
    return outcome


def connector_discover(*, connector: Connector) -> int:
    """Discovery step of one connector (beat): register what is new (paused and completed
    connectors are skipped), then give the connector's jobs a run at once when something was."""
    if connector.state in (ConnectorState.PAUSED, ConnectorState.COMPLETED):
        return 0
    registered = discover(connector)
    if registered:
        for job in Job.objects.filter(connector=connector, paused=False).order_by("pk"):
            job_run(job=job)
    return registered


@dataclass(frozen=True)
class StepSkipped:
    """A fixed step's message that was not run: the same step ran `gap` seconds ago or less."""

    step: str
    gap: float

    def __str__(self) -> str:
        return f"skipped {self.step}: it ran less than {self.gap:g} s ago"


def fixed_step_run(name: str, step: Callable[[], T]) -> T | StepSkipped:
    """Run fixed step `name` unless it ran less than half its interval ago, by the database's
    clock (query step_claim). Beat sends a step every interval; behind busy workers several copies
    wait in the broker, and all but the first are skipped here at the cost of one statement.
    Celery's message expiry would do the same by the worker's clock, which a worker whose clock
    is wrong (an hour ahead) turns into discarding every step."""
    _task, every = FIXED_STEPS[name]
    gap = every / 2
    with connection.cursor() as cursor:
        # a row of its own: the step's row (the reaper's) says when it last ran to the end, which
        # the dashboard's and /metrics' "overdue" read; a claim that then fails must not look fresh
        cursor.execute(query("step_claim"), {"name": f"{name}:claimed", "gap": gap})
        claimed = cursor.fetchone() is not None
    if not claimed:
        return StepSkipped(step=name, gap=gap)
    return step()


def leases_reap() -> list[int]:
    """Reaper step: expired leases -> failed attempts; their retries are sent when due.

    Each run is recorded (database clock) so an overdue reaper shows on the dashboard and
    in /metrics."""
    reaped = batches_reap_expired()
    batches_dispatch_due()
    MaintenanceRun.objects.update_or_create(
        name=REAPER, defaults={"last_run_at": Now(), "outcome": {"reaped": reaped[:100]}}
    )
    # /metrics counts only the attempts after the rollup (services/metrics_rollup.py)
    attempt_rollup_advance()
    return reaped


def step_overdue_after(name: str) -> int:
    """Seconds after which a fixed step that has not run is overdue: four missed intervals,
    and at least a minute (beat and workers restart)."""
    _task, every = FIXED_STEPS[name]
    return max(4 * every, 60)


def connectors_orchestrate() -> list[str]:
    """Orchestration step: complete finished snapshots, release the connectors waiting for them
    and give their jobs a run straight away; returns the released connectors' names."""
    outcome = orchestrate()
    restatements.pending_restate()  # chains whose rebuild waited for a batch in flight
    released = outcome["released"]
    for job in Job.objects.filter(connector__name__in=released, paused=False).order_by("pk"):
        job_run(job=job)
    return released
