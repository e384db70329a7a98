"""kill -9 around the Delta commit (issue 22): a files-to-Delta job whose worker dies after
writing its files, once before the Delta commit and once after it (before the control plane
recorded the publish), still shows each source row once at every Delta version.

The worker is paused at the exact step by a row lock this test holds in PostgreSQL, and the test
waits on facts (the batch's files on disk, the worker's fence waiting for that lock), not clocks:
- before the commit: the test holds the job's watermark row, which tidemark_publish_begin locks
  first, so the worker has written its files and waits to publish;
- after the commit: the test holds the row of the batch being replaced, which only
  tidemark_publish_end updates, so the worker has committed to Delta and waits to record it.
"""

import os
import signal

import psycopg2
import pytest
from deltalake import DeltaTable

from inventory.models import Batch, BatchStatus
from inventory.services import dispatch, outputs
from inventory.services.corrections import watermark_correct
from tests.chaos.conftest import drive, worker_pid
from tests.test_delta_sink import assert_each_row_at_most_once_at_every_version, rows_at
from tests.test_exactly_once import expected_rows, make_files_job
from tests.worker_fixtures import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_worker(worker_env, private_queue, worker_log_dir):
    worker = WorkerProcess(
        env={**worker_env, "CELERY_QUEUE": private_queue},
        queue=private_queue,
        name="delta-kill",
        log_dir=worker_log_dir,
    )
    yield worker.start()
    worker.stop()


def _hold(statement: str, params) -> "psycopg2.extensions.connection":
    conn = psycopg2.connect(outputs.control_plane_dsn())
    with conn.cursor() as cur:
        cur.execute(statement, params)
        assert cur.rowcount == 1
    return conn  # the lock is held until this transaction ends


def _fence_waiting(function: str) -> bool:
    with psycopg2.connect(outputs.control_plane_dsn()) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            [f"%{function}%"],
        )
        return cur.fetchone()[0] > 0


def _running(job):
    return Batch.objects.filter(job=job, status=BatchStatus.RUNNING).first()


def _files_of(out, batch_id: int, attempt: int) -> list:
    return list(out.glob(f"tidemark-b{batch_id}-a{attempt}-*/*.parquet"))


def test_a_worker_killed_before_and_after_the_delta_commit_leaves_each_row_once(
    tmp_path, own_worker
):
    out = tmp_path / "delta"
    job, _ = make_files_job(
        tmp_path, "delta-kill", {"kind": "delta", "path": str(out)}, items=4, max_items=4
    )
    job.lease_seconds = 3
    job.save(update_fields=["lease_seconds"])

    # 1. killed after writing its files, before the Delta commit
    held = _hold("SELECT 1 FROM inventory_watermark WHERE job_id = %s FOR UPDATE", [job.pk])
    try:
        dispatch.job_run(job=job)
        batch = wait_until(lambda: _running(job), timeout=60, message="the batch to run")
        wait_until(lambda: _files_of(out, batch.pk, 1), timeout=120, message="its files")
        wait_until(lambda: _fence_waiting("tidemark_publish_begin"), timeout=60, message="fence")
        os.kill(worker_pid(batch), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    assert not (out / "_delta_log").exists()  # the files are there, no reader sees them
    drive(
        lambda: Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).exists(),
        timeout=240,
        jobs=[job],
        message="the retry after the kill before the commit",
    )
    assert Batch.objects.get(pk=batch.pk).attempt >= 2
    assert rows_at(out) == expected_rows(range(4))
    assert DeltaTable(str(out)).version() == 0  # the killed attempt never committed

    # 2. a replay whose worker is killed after the Delta commit, before the fence commits
    watermark_correct(
        job=job, value=batch.span.lower - 1, actor="a", reason="kill test", replay=True
    )
    held = _hold("SELECT 1 FROM inventory_batch WHERE id = %s FOR UPDATE", [batch.pk])
    try:
        dispatch.job_run(job=job)
        replay = wait_until(lambda: _running(job), timeout=60, message="the replay to run")
        wait_until(
            lambda: DeltaTable(str(out)).version() == 1, timeout=120, message="its Delta commit"
        )
        wait_until(lambda: _fence_waiting("tidemark_publish_end"), timeout=60, message="fence")
        os.kill(worker_pid(replay), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    # committed to Delta, not to the control plane: the replaced output left in that same commit
    assert rows_at(out, 1) == expected_rows(range(4))
    drive(
        lambda: Batch.objects.filter(pk=replay.pk, status=BatchStatus.SUCCEEDED).exists(),
        timeout=240,
        jobs=[job],
        message="the replay's retry after the kill after the commit",
    )
    assert Batch.objects.get(pk=replay.pk).attempt >= 2
    assert Batch.objects.get(pk=batch.pk).replaced_by_id == replay.pk
    assert DeltaTable(str(out)).version() == 2
    assert_each_row_at_most_once_at_every_version(out)
    assert rows_at(out) == expected_rows(range(4))
