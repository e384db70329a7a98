"""Periodic work, one step at a time: beat entries from code, scheduled runs, the reaper, retry
requeue, backfill pacing, connector orchestration, and job validation of what a job runs.

These steps only plan and enqueue; enqueueing happens on commit, so the tests capture the
on-commit callbacks without running them (no task reaches Redis here; test_worker_* run them).
"""

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db.models.functions import Now
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from inventory.models import Batch, BatchKind, BatchStatus, ConnectorState, MaintenanceRun
from inventory.services import dispatch, lifecycle, scheduling
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create, connector_pause
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_update
from inventory.sources.config import DEFAULT_DISCOVER_SECONDS
from tests.support.factories import ConnectorFactory, make_assets, make_job
from workers import execution


def _statuses(job):
    return list(Batch.objects.filter(job=job).order_by("span").values_list("status", flat=True))


@pytest.mark.django_db
def test_sync_registers_job_schedules_discovery_and_fixed_steps(tmp_path):
    connector = connector_create(
        name="landing", kind="files", config={"path": str(tmp_path), "discover_seconds": 20}
    )
    every = make_job(connector=connector, name="every-30s", schedule_seconds=30)
    cron = make_job(connector=connector, name="nightly", schedule_cron="15 2 * * *")
    make_job(connector=connector, name="manual")
    # `migrate` registered the fixed steps already; start from empty tables to see them created
    PeriodicTask.objects.filter(name__startswith="tidemark:").delete()

    report = scheduling.schedules_sync()

    entries = {e.name: e for e in PeriodicTask.objects.filter(name__startswith="tidemark:")}
    assert set(scheduling.FIXED_STEPS) <= set(entries)
    interval_entry = entries["tidemark:run-job:every-30s"]
    assert (interval_entry.task, json.loads(interval_entry.args)) == (
        "tidemark.run_job",
        [every.pk],
    )
    assert (interval_entry.interval.every, interval_entry.interval.period) == (30, "seconds")
    cron_entry = entries["tidemark:run-job:nightly"]
    assert (cron_entry.crontab.minute, cron_entry.crontab.hour) == ("15", "2")
    assert json.loads(cron_entry.args) == [cron.pk]
    assert "tidemark:run-job:manual" not in entries
    discover = entries["tidemark:discover:landing"]
    assert (discover.task, discover.interval.every) == ("tidemark.discover_assets", 20)
    assert sorted(report.created) == sorted(entries)

    # a second sync changes nothing
    again = scheduling.schedules_sync()
    assert (again.created, again.updated, again.removed) == ([], [], [])


@pytest.mark.django_db
def test_beat_sends_housekeeping_ahead_of_work_and_never_expiring(tmp_path):
    """What beat sends (django-celery-beat's entry options): the fixed steps without a priority
    (the queue's plain list, taken first) and without an expiry (a worker would read it against
    its own clock); job runs and discovery a step behind (dispatch.WORK_PRIORITY), as every nudge
    is. An entry synced before (an expiry on the steps, no priority on work) is updated."""
    from django_celery_beat.schedulers import ModelEntry

    from controlplane.celery import app

    connector = connector_create(name="landing", kind="files", config={"path": str(tmp_path)})
    make_job(connector=connector, name="every-30s", schedule_seconds=30)
    scheduling.schedules_sync()
    PeriodicTask.objects.filter(name__startswith="tidemark:").update(
        priority=None, expire_seconds=5
    )

    report = scheduling.schedules_sync()

    entries = {e.name: e for e in PeriodicTask.objects.filter(name__startswith="tidemark:")}
    assert sorted(report.updated) == sorted(entries)
    options = {name: ModelEntry(entry, app=app).options for name, entry in entries.items()}
    for name in scheduling.FIXED_STEPS:
        assert "priority" not in options[name], name
        assert "expires" not in options[name], name
    for name in ("tidemark:run-job:every-30s", "tidemark:discover:landing"):
        assert options[name]["priority"] == dispatch.WORK_PRIORITY, name
        assert "expires" not in options[name], name


@pytest.mark.django_db
def test_a_fixed_step_copy_within_half_its_interval_is_skipped_by_the_database_clock():
    """Copies of a step that waited in the broker: the first runs, the next is skipped at the cost
    of one statement, and once half the interval has passed (by the database's clock) it runs."""
    runs = []

    def step():
        runs.append(1)
        return "ran"

    assert scheduling.fixed_step_run(scheduling.REQUEUE, step) == "ran"
    skipped = scheduling.fixed_step_run(scheduling.REQUEUE, step)
    assert isinstance(skipped, scheduling.StepSkipped)
    assert str(skipped) == "skipped tidemark:requeue-due: it ran less than 2.5 s ago"
    # another step is not held back by this one
    assert scheduling.fixed_step_run(scheduling.PACE_BACKFILLS, step) == "ran"
    assert len(runs) == 2
    MaintenanceRun.objects.filter(name=f"{scheduling.REQUEUE}:claimed").update(
        last_run_at=Now() - timedelta(minutes=1)
    )
    assert scheduling.fixed_step_run(scheduling.REQUEUE, step) == "ran"
    assert len(runs) == 3


@pytest.mark.django_db
def test_a_claimed_reaper_step_that_fails_still_shows_the_reaper_overdue():
    """The claim is a row of its own: the reaper's row says when it last ran to the end, so a
    reaper that is taken and then fails every time still shows as overdue (selectors)."""
    from inventory import selectors

    def broken():
        raise RuntimeError("the reaper failed")

    with pytest.raises(RuntimeError):
        scheduling.fixed_step_run(scheduling.REAPER, broken)
    assert not MaintenanceRun.objects.filter(name=scheduling.REAPER).exists()
    assert selectors.reaper_status().last_run_at is None


@pytest.mark.django_db
def test_migrate_registers_the_maintenance_steps():
    """The test database was built by `migrate`: the reaper and the other steps are there
    without anyone running sync_schedules."""
    names = set(PeriodicTask.objects.values_list("name", flat=True))
    assert set(scheduling.FIXED_STEPS) <= names
    reaper = PeriodicTask.objects.get(name="tidemark:reap-leases")
    assert (reaper.task, reaper.enabled) == ("tidemark.reap_leases", True)


@pytest.mark.django_db
def test_sync_disables_paused_jobs_and_removes_entries_of_deleted_jobs(tmp_path):
    connector = connector_create(name="c", kind="files", config={"path": str(tmp_path)})
    job = make_job(connector=connector, name="hourly", schedule_seconds=3600)
    other = make_job(connector=connector, name="gone", schedule_seconds=60)
    PeriodicTask.objects.create(
        name="hand-made",
        task="celery.backend_cleanup",
        interval=IntervalSchedule.objects.create(every=1, period=IntervalSchedule.DAYS),
    )
    scheduling.schedules_sync()

    job_update(job=job, paused=True)
    other.delete()
    report = scheduling.schedules_sync()

    assert report.updated == ["tidemark:run-job:hourly"]
    assert report.removed == ["tidemark:run-job:gone"]
    assert PeriodicTask.objects.get(name="tidemark:run-job:hourly").enabled is False
    assert PeriodicTask.objects.filter(name="hand-made").exists()


@pytest.mark.django_db
def test_sync_schedules_command_prints_what_it_changed(tmp_path, capsys):
    connector = connector_create(name="c2", kind="files", config={"path": str(tmp_path)})
    make_job(connector=connector, name="j", schedule_seconds=10)
    call_command("sync_schedules")
    out = capsys.readouterr().out
    assert "tidemark:run-job:j" in out and "created" in out


@pytest.mark.django_db
def test_a_bad_cron_expression_or_unknown_processor_is_refused_naming_the_field():
    connector = ConnectorFactory()
    with pytest.raises(InvalidInput) as cron:
        make_job(connector=connector, schedule_cron="every day")
    assert cron.value.field == "schedule_cron"
    with pytest.raises(InvalidInput) as processor:
        make_job(connector=connector, processor="no_such_thing")
    assert processor.value.field == "processor"
    assert "no_such_thing" in processor.value.message and "passthrough" in processor.value.message
    with pytest.raises(InvalidInput) as params:
        make_job(connector=connector, processor="sql", params={"query": ""})
    assert params.value.field == "params" and "query" in params.value.message
    with pytest.raises(InvalidInput) as executor:
        make_job(connector=connector, executor="yarn")
    assert executor.value.field == "executor"

    job = make_job(connector=connector, processor="sql", params={"query": "SELECT * FROM batch"})
    with pytest.raises(InvalidInput) as update:
        job_update(job=job, processor="nope")
    assert update.value.field == "processor"


@pytest.mark.django_db
def test_a_run_plans_up_to_the_concurrency_limit_and_nothing_when_nothing_is_new(
    django_capture_on_commit_callbacks,
):
    connector = ConnectorFactory()
    make_assets(connector, [10] * 5)
    job = make_job(connector=connector, batch_weight=10, max_items=1, max_concurrency=2)

    with django_capture_on_commit_callbacks() as callbacks:
        first = dispatch.job_run(job=job)
    assert len(first.planned) == 2 and first.dispatched == first.planned
    assert len(callbacks) == 1  # one enqueue callback for the run

    # both slots are taken: the next tick plans nothing more
    with django_capture_on_commit_callbacks() as callbacks:
        assert dispatch.job_run(job=job).planned == []
    assert callbacks == []

    for batch_id in first.planned:
        batch = lifecycle.batch_start(batch_id=batch_id, worker="t")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    assert len(dispatch.job_run(job=job).planned) == 2
    Batch.objects.filter(job=job).update(status=BatchStatus.SUCCEEDED, lease_expires_at=None)
    assert len(dispatch.job_run(job=job).planned) == 1
    Batch.objects.filter(job=job).update(status=BatchStatus.SUCCEEDED)
    with django_capture_on_commit_callbacks() as callbacks:
        idle = dispatch.job_run(job=job)
    assert (idle.planned, idle.dispatched, callbacks) == ([], [], [])


@pytest.mark.django_db
def test_paused_jobs_and_paused_connectors_plan_nothing():
    connector = ConnectorFactory()
    make_assets(connector, [10, 10])
    job = make_job(connector=connector, batch_weight=10, max_items=1, paused=True)
    assert dispatch.job_run(job=job).reason == f"job {job.name} is paused"
    job_update(job=job, paused=False)
    connector_pause(connector=connector)
    job.refresh_from_db()
    outcome = dispatch.job_run(job=job)
    assert outcome.planned == [] and "paused" in outcome.reason
    assert not Batch.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_the_reaper_step_fails_expired_leases_and_sends_due_retries(
    django_capture_on_commit_callbacks,
):
    connector = ConnectorFactory()
    make_assets(connector, [10])
    job = make_job(connector=connector, batch_weight=10, retry_backoff_seconds=0, lease_seconds=30)
    batch = lifecycle.batch_acquire(job=job, worker="lost-worker")
    Batch.objects.filter(pk=batch.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    with django_capture_on_commit_callbacks() as callbacks:
        assert scheduling.leases_reap() == [batch.pk]
    batch.refresh_from_db()
    assert batch.status == BatchStatus.QUEUED and batch.error["type"] == "LeaseExpired"
    assert len(callbacks) == 1
    assert scheduling.leases_reap() == []


@pytest.mark.django_db
def test_requeue_waits_for_the_backoff():
    connector = ConnectorFactory()
    make_assets(connector, [10])
    job = make_job(connector=connector, batch_weight=10, retry_backoff_seconds=60)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=batch.pk, attempt=1, error={"type": "X", "message": "boom"})
    assert dispatch.batches_dispatch_due() == []
    Batch.objects.filter(pk=batch.pk).update(next_attempt_at=timezone.now())
    assert dispatch.batches_dispatch_due() == [batch.pk]
    assert Batch.objects.get(pk=batch.pk).status == BatchStatus.QUEUED


@pytest.mark.django_db
def test_pacing_keeps_a_backfill_within_max_concurrency():
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 6)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    backfill = backfill_create(
        job=job,
        range_start=assets[0].pk,
        range_end=assets[-1].pk,
        max_concurrency=2,
        priority=1,
    )
    sent = dispatch.backfills_pace()
    assert len(sent[backfill.pk]) == 2

    # one of them starts: one slot left; the started one is not sent again
    started = lifecycle.batch_start(batch_id=sent[backfill.pk][0], worker="w")
    again = dispatch.backfill_pace(backfill=backfill)
    assert len(again) == 1 and started.pk not in again
    lifecycle.batch_start(batch_id=again[0], worker="w")
    assert dispatch.backfill_pace(backfill=backfill) == []

    # the start-time check refuses a third running batch even if a task was sent twice
    third = Batch.objects.filter(backfill=backfill, status=BatchStatus.QUEUED).order_by("span")[0]
    outcome = execution.batch_execute(batch_id=third.pk, executor_for=_no_executor, worker="w")
    assert (outcome.status, outcome.detail) == ("ignored", "backfill is at capacity")


def _no_executor(name):
    raise AssertionError("the executor must not run")


@pytest.mark.django_db
def test_backfill_priority_against_incremental_work():
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 5)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    done = dispatch.job_run(job=job)  # items 0 and 1 committed: the backfill reworks them
    Batch.objects.filter(pk__in=done.planned).update(status=BatchStatus.SUCCEEDED)
    done = dispatch.job_run(job=job)
    Batch.objects.filter(pk__in=done.planned).update(status=BatchStatus.SUCCEEDED)
    low = backfill_create(job=job, range_start=assets[0].pk, range_end=assets[1].pk, priority=-1)
    live = dispatch.job_run(job=job)
    assert len(live.planned) == 1
    # incremental work is queued: the low-priority backfill waits
    assert low.pk not in dispatch.backfills_pace()
    Batch.objects.filter(pk__in=live.planned).update(status=BatchStatus.SUCCEEDED)
    assert len(dispatch.backfills_pace()[low.pk]) == 1

    urgent = backfill_create(job=job, range_start=assets[3].pk, range_end=assets[4].pk, priority=5)
    held = dispatch.job_run(job=job)
    assert held.planned == [] and f"backfill {urgent.pk}" in held.reason
    assert list(dispatch.backfills_pace())[0] == urgent.pk


@pytest.mark.django_db
def test_orchestration_releases_waiting_connectors_and_runs_their_jobs(
    django_capture_on_commit_callbacks, tmp_path
):
    first = ConnectorFactory(name="raw", state=ConnectorState.ACTIVE)
    second = connector_create(
        name="curated", kind="files", config={"path": str(tmp_path)}, start_after="raw"
    )
    assert second.state == ConnectorState.WAITING
    make_assets(second, [10])
    job = make_job(connector=second, batch_weight=10)
    assert scheduling.connectors_orchestrate() == []

    first.state = ConnectorState.COMPLETED
    first.save()
    with django_capture_on_commit_callbacks() as callbacks:
        assert scheduling.connectors_orchestrate() == ["curated"]
    assert _statuses(job) == [BatchStatus.QUEUED]
    assert len(callbacks) == 1
    assert Batch.objects.get(job=job).kind == BatchKind.INCREMENTAL


@pytest.mark.django_db
@pytest.mark.parametrize("expression", ["99 * * * *", "0 25 * * *", "0 0 32 * *", "0 0 * 13 *"])
def test_a_cron_field_out_of_range_is_refused_naming_schedule_cron(expression):
    connector = ConnectorFactory()
    with pytest.raises(InvalidInput) as cron:
        make_job(connector=connector, schedule_cron=expression)
    assert cron.value.field == "schedule_cron"
    assert expression in cron.value.message


@pytest.mark.django_db
def test_max_concurrency_below_one_is_refused_on_create_and_on_update():
    from inventory.services.jobs import job_update

    connector = ConnectorFactory()
    with pytest.raises(InvalidInput) as created:
        make_job(connector=connector, max_concurrency=0)
    assert created.value.field == "max_concurrency"
    job = make_job(connector=connector, name="ok")
    with pytest.raises(InvalidInput) as updated:
        job_update(job=job, max_concurrency=0)
    assert updated.value.field == "max_concurrency"
    job.refresh_from_db()
    assert job.max_concurrency == 1


@pytest.mark.django_db
def test_a_sync_with_nothing_to_change_reads_the_same_whatever_the_number_of_jobs(tmp_path):
    """The sync runs every minute (and after every migrate): with nothing to change it reads
    each table once, rather than once per job, and writes nothing."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    connector = connector_create(name="many", kind="files", config={"path": str(tmp_path)})

    def statements_of_a_quiet_sync() -> int:
        scheduling.schedules_sync()
        with CaptureQueriesContext(connection) as captured:
            report = scheduling.schedules_sync()
        assert (report.created, report.updated, report.removed) == ([], [], [])
        return len(captured)

    for i in range(3):
        make_job(connector=connector, name=f"few-{i}", schedule_seconds=30 + i)
    few = statements_of_a_quiet_sync()
    for i in range(30):
        make_job(connector=connector, name=f"many-{i}", schedule_cron=f"{i} 2 * * *")
    assert statements_of_a_quiet_sync() == few

    # a changed schedule is still written, and only it
    job = make_job(connector=connector, name="changes", schedule_seconds=10)
    scheduling.schedules_sync()
    job_update(job=job, schedule_seconds=20)
    report = scheduling.schedules_sync()
    assert report.updated == ["tidemark:run-job:changes"]
    assert PeriodicTask.objects.get(name="tidemark:run-job:changes").interval.every == 20


@pytest.mark.django_db
@pytest.mark.parametrize("every", ["x", 0, -5, 2**40, 1.5, True])
def test_a_discovery_interval_that_is_not_one_is_refused_naming_it(tmp_path, every):
    # saved, "x" made every schedule sync raise: beat refused to start, `migrate` failed, and no
    # job's schedule was registered any more; 2**40 overflowed the beat table's interval
    for kind, config in [
        ("files", {"path": str(tmp_path)}),
        ("files", {"meta_table": {"table": "nope"}, "dsn_env": "TM_NOPE"}),
    ]:
        with pytest.raises(InvalidInput) as refused:
            connector_create(name="c", kind=kind, config={**config, "discover_seconds": every})
        assert refused.value.field == "config.discover_seconds"


@pytest.mark.django_db
def test_a_bad_discovery_interval_stored_before_the_rule_does_not_stop_the_sync(tmp_path):
    stored = ConnectorFactory(name="old", config={"path": str(tmp_path), "discover_seconds": "x"})
    make_job(connector=ConnectorFactory(name="fine"), name="every-30s", schedule_seconds=30)
    scheduling.schedules_sync()
    assert PeriodicTask.objects.filter(name=f"{scheduling.JOB_PREFIX}every-30s").exists()
    entry = PeriodicTask.objects.get(name=f"{scheduling.DISCOVER_PREFIX}{stored.name}")
    assert entry.interval.every == DEFAULT_DISCOVER_SECONDS
