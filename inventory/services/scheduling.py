"""Periodic work, declared here and registered in django-celery-beat's tables.

`schedules_sync` makes the beat tables match the inventory: one `run_job` entry per scheduled job
(interval from `schedule_seconds`, or a crontab from `schedule_cron`; disabled while the job is
paused), one discovery entry per `files` connector that scans a directory, and the fixed steps
(lease reaper, retry requeue, backfill pacing, connector orchestration, and this sync itself, so
jobs created later get their schedule without anyone running a command). Entries Tidemark created
for jobs or connectors that are gone are removed; entries made by hand are left alone.
"""

from dataclasses import asdict, dataclass, field

from django.db import transaction
from django.db.models.functions import Now
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from inventory.models import Connector, ConnectorState, Job, MaintenanceRun
from inventory.services import restatements
from inventory.services.cron import parse_cron
from inventory.services.dispatch import RunOutcome, batches_dispatch_due, job_run
from inventory.services.errors import InvalidInput
from inventory.services.lifecycle import batches_reap_expired
from inventory.services.metrics_rollup import attempt_rollup_advance
from inventory.services.orchestration import orchestrate
from inventory.sources.discovery import discover, discovers

PREFIX = "tidemark:"
JOB_PREFIX = f"{PREFIX}run-job:"
DISCOVER_PREFIX = f"{PREFIX}discover:"
DEFAULT_DISCOVER_SECONDS = 60

# name -> (task, every seconds)
FIXED_STEPS = {
    f"{PREFIX}reap-leases": ("tidemark.reap_leases", 15),
    f"{PREFIX}requeue-due": ("tidemark.requeue_due", 5),
    f"{PREFIX}pace-backfills": ("tidemark.pace_backfills", 5),
    f"{PREFIX}release-connectors": ("tidemark.release_connectors", 30),
    f"{PREFIX}sync-schedules": ("tidemark.sync_schedules", 60),
}


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _interval(seconds: int) -> IntervalSchedule:
    schedule, _ = IntervalSchedule.objects.get_or_create(
        every=seconds, period=IntervalSchedule.SECONDS
    )
    return schedule


def _crontab(expression: str) -> CrontabSchedule:
    fields = parse_cron(expression)
    schedule, _ = CrontabSchedule.objects.get_or_create(**fields, timezone="UTC")
    return schedule


def _upsert(report: SyncReport, *, name: str, task: str, args: list, enabled: bool, **schedule):
    wanted = {
        "task": task,
        "args": _json_args(args),
        "enabled": enabled,
        "interval": schedule.get("interval"),
        "crontab": schedule.get("crontab"),
    }
    entry = PeriodicTask.objects.filter(name=name).first()
    if entry is None:
        PeriodicTask.objects.create(name=name, **wanted)
        report.created.append(name)
        return
    changed = [key for key, value in wanted.items() if getattr(entry, key) != value]
    if changed:
        for key in changed:
            setattr(entry, key, wanted[key])
        # save() (not update()) so django-celery-beat notices the change and reloads
        entry.save()
        report.updated.append(name)


def _json_args(args: list) -> str:
    import json

    return json.dumps(args)


def _job_schedule(job: Job) -> dict | None:
    if job.schedule_cron:
        return {"crontab": _crontab(job.schedule_cron)}
    if job.schedule_seconds:
        return {"interval": _interval(job.schedule_seconds)}
    return None


@transaction.atomic
def schedules_sync() -> SyncReport:
    """Make django-celery-beat's entries match the jobs and connectors (idempotent)."""
    report = SyncReport()
    wanted_names = set()
    for name, (task, every) in FIXED_STEPS.items():
        _upsert(report, name=name, task=task, args=[], enabled=True, interval=_interval(every))
        wanted_names.add(name)

    for job in Job.objects.select_related("connector").order_by("pk"):
        schedule = _job_schedule(job)
        if schedule is None:
            continue
        name = f"{JOB_PREFIX}{job.name}"
        _upsert(
            report,
            name=name,
            task="tidemark.run_job",
            args=[job.pk],
            enabled=not job.paused,
            **schedule,
        )
        wanted_names.add(name)

    for connector in Connector.objects.order_by("pk"):
        if not discovers(connector):
            continue
        config = connector.config or {}
        every = int(config.get("discover_seconds") or DEFAULT_DISCOVER_SECONDS)
        name = f"{DISCOVER_PREFIX}{connector.name}"
        _upsert(
            report,
            name=name,
            task="tidemark.discover_assets",
            args=[connector.pk],
            enabled=connector.state != ConnectorState.COMPLETED,
            interval=_interval(max(every, 1)),
        )
        wanted_names.add(name)

    stale = PeriodicTask.objects.filter(name__startswith=PREFIX).exclude(name__in=wanted_names)
    for entry in stale:
        report.removed.append(entry.name)
        entry.delete()
    return report


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


REAPER = f"{PREFIX}reap-leases"


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
