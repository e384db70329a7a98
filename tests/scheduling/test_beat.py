"""celery beat alone is enough: it registers Tidemark's periodic work itself when it starts, and
its reaper returns a dead worker's batch (an expired lease) to the lifecycle, also with a job
stored with a cron celery cannot compute (issue 42: February 31st made beat exit)."""

import subprocess
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from inventory.models import Batch, BatchStatus, Job
from inventory.services import lifecycle, scheduling
from tests.support.factories import ConnectorFactory, make_assets, make_job
from tests.support.worker_fixtures import CELERY, ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_slow_beat_alone_registers_the_reaper_and_reaps_an_expired_lease(
    celery_worker, worker_env, tmp_path
):
    PeriodicTask.objects.all().delete()  # a deployment where nobody ran sync_schedules
    connector = ConnectorFactory(name="beat-src")
    make_assets(connector, [10, 10])
    job = make_job(connector=connector, name="beat-job", batch_weight=10, max_attempts=1)
    batch = lifecycle.batch_acquire(job=job, worker="gone-worker")
    Batch.objects.filter(pk=batch.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    # an entry made by hand (the sync leaves it alone): the scheduler skips it (controlplane/beat)
    PeriodicTask.objects.create(
        name="by-hand-feb-31st",
        task="tidemark.reap_leases",
        crontab=CrontabSchedule.objects.create(
            minute="5", hour="*", day_of_month="31", month_of_year="2", timezone="UTC"
        ),
    )
    # a job stored before the cron rule, with the entry an older sync made for it. Every hour:
    # django-celery-beat leaves out of its schedule a crontab whose hour is more than two hours
    # away, and beat died on such an entry only when it came near
    feb31 = make_job(connector=connector, name="feb-31st", schedule_seconds=60)
    Job.objects.filter(pk=feb31.pk).update(schedule_seconds=None, schedule_cron="0 * 31 2 *")
    PeriodicTask.objects.create(
        name=f"{scheduling.JOB_PREFIX}{feb31.name}",
        task="tidemark.run_job",
        args=f"[{feb31.pk}]",
        crontab=CrontabSchedule.objects.create(
            minute="0", hour="*", day_of_month="31", month_of_year="2", timezone="UTC"
        ),
    )

    log_path = tmp_path / "beat.log"
    with open(log_path, "wb") as log:
        beat = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                "controlplane",
                "beat",
                "--loglevel=INFO",
                "--schedule",
                str(tmp_path / "beat-schedule"),
            ],
            cwd=ROOT,
            env=worker_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def reaped():
            if beat.poll() is not None:
                pytest.fail(f"beat exited: {log_path.read_text()[-3000:]}")
            return Batch.objects.get(pk=batch.pk).status != BatchStatus.RUNNING

        wait_until(reaped, timeout=90, interval=0.5, message="the reaper to run")
    finally:
        beat.terminate()
        beat.wait(timeout=30)

    batch.refresh_from_db()
    assert batch.status == BatchStatus.DEAD  # one attempt allowed, and it was lost
    assert not PeriodicTask.objects.filter(name=f"{scheduling.JOB_PREFIX}{feb31.name}").exists()
    assert scheduling.unschedulable_jobs().keys() == {feb31.name}
    assert batch.error["type"] == "LeaseExpired"
    assert "gone-worker" in batch.error["message"]
    assert PeriodicTask.objects.filter(name="tidemark:reap-leases", enabled=True).exists()
    assert "Tidemark schedules registered" in log_path.read_text()
