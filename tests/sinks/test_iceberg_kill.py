"""kill -9 around the Iceberg catalog commit (issue 46): a files-to-Iceberg job whose worker dies
after writing its files, once before the catalog commit and once after it (before the control
plane recorded the publish), then retried, replayed and backfilled, shows each source row once at
every snapshot, read by pyiceberg and by DuckDB's Iceberg reader.

As in tests/sinks/test_delta_kill.py, the worker is paused at the exact step by a row lock this test
holds in PostgreSQL, and the test waits on facts (the batch's files on disk, the worker's fence
waiting for that lock, the table's new snapshot), not clocks:
- before the commit: the test holds the job's watermark row, which tidemark_publish_begin locks
  first, so the worker has written its files and waits to publish;
- after the commit: the test holds the row of the batch being replaced, which only
  tidemark_publish_end updates, so the worker has committed to the catalog and waits to record it.
"""

import os
import signal
import uuid
from pathlib import Path

import pytest

from inventory.models import Batch, BatchStatus, Watermark
from inventory.services import dispatch
from inventory.services.backfills import backfill_create
from inventory.services.corrections import watermark_correct
from tests.chaos.conftest import drive, worker_pid
from tests.support.fence_locks import _fence_waiting, _hold, _running
from tests.support.files_job import expected_rows, make_files_job
from tests.support.iceberg_tables import (
    assert_each_row_exactly_once_at_every_snapshot,
    iceberg_sink,
    latest_rows,
    load,
    snapshots,
)
from tests.support.worker_fixtures import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def own_queue(worker_env) -> str:
    return f"tidemark-iceberg-kill-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def own_worker(worker_env, own_queue, worker_log_dir):
    worker = WorkerProcess(
        env={**worker_env, "CELERY_QUEUE": own_queue},
        queue=own_queue,
        name="iceberg-kill",
        log_dir=worker_log_dir,
    )
    yield worker.start()
    worker.stop()


@pytest.fixture(autouse=True)
def _sent_to_own_queue(own_queue):
    from controlplane.celery import app

    previous = app.conf.CELERY_TASK_DEFAULT_QUEUE
    app.conf.CELERY_TASK_DEFAULT_QUEUE = own_queue
    yield
    app.conf.CELERY_TASK_DEFAULT_QUEUE = previous


def _files_of(sink, batch_id: int, attempt: int) -> list:
    data = Path(sink["warehouse"]) / "out" / "t" / "data"
    return list(data.glob(f"tidemark-b{batch_id}-a{attempt}-*/*.parquet"))


def _snapshot_count(sink) -> int:
    try:
        return len(load(sink).snapshots())
    except Exception:  # noqa: BLE001 - no table yet
        return 0


def _live(sink, snapshot_index=-1) -> set[str]:
    table = load(sink)
    snapshot = table.snapshots()[snapshot_index]
    return {t.file.file_path for t in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()}


def test_a_worker_killed_before_and_after_the_catalog_commit_leaves_each_row_once(
    tmp_path, own_worker
):
    sink = iceberg_sink(tmp_path)
    job, item_of = make_files_job(tmp_path, "iceberg-kill", sink, items=4, max_items=2)
    job.lease_seconds = 3
    job.save(update_fields=["lease_seconds"])

    # 1. killed after writing its files, before the catalog commit
    held = _hold("SELECT 1 FROM inventory_watermark WHERE job_id = %s FOR UPDATE", [job.pk])
    try:
        dispatch.job_run(job=job)
        batch = wait_until(lambda: _running(job), timeout=60, message="the batch to run")
        wait_until(lambda: _files_of(sink, batch.pk, 1), timeout=120, message="its files")
        wait_until(lambda: _fence_waiting("tidemark_publish_begin"), timeout=60, message="fence")
        os.kill(worker_pid(batch), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    assert _snapshot_count(sink) == 0  # the files are there, no snapshot names them
    killed = {"file://" + str(f) for f in _files_of(sink, batch.pk, 1)}
    drive(
        lambda: Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).count() == 2,
        timeout=240,
        jobs=[job],
        message="the retry after the kill before the commit",
    )
    assert Batch.objects.get(pk=batch.pk).attempt >= 2
    assert latest_rows(sink) == expected_rows(range(4))
    assert _snapshot_count(sink) == 2  # two batches; the killed attempt never committed
    assert killed and not killed & _live(sink)  # orphans, never named

    # 2. a replay whose worker is killed after the catalog commit, before the fence commits
    count = _snapshot_count(sink)
    watermark_correct(
        job=job, value=batch.span.lower - 1, actor="a", reason="kill test", replay=True
    )
    held = _hold("SELECT 1 FROM inventory_batch WHERE id = %s FOR UPDATE", [batch.pk])
    try:
        dispatch.job_run(job=job)
        replay = wait_until(lambda: _running(job), timeout=60, message="the replay to run")
        wait_until(
            lambda: _snapshot_count(sink) == count + 1,
            timeout=120,
            message="its catalog commit",
        )
        wait_until(lambda: _fence_waiting("tidemark_publish_end"), timeout=60, message="fence")
        os.kill(worker_pid(replay), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    # in the catalog, not in the control plane: the replaced output left in that same snapshot
    assert snapshots(sink)[-1] == expected_rows(range(4))
    killed = _live(sink) - _live(sink, count - 1)
    # done when the replay and the batch after it (superseded by the correction, planned again
    # once the replay commits) are committed: the watermark past every item, nothing open
    drive(
        lambda: Batch.objects.filter(pk=replay.pk, status=BatchStatus.SUCCEEDED).exists()
        and Watermark.objects.get(job=job).position > max(item_of)
        and not Batch.objects.filter(job=job, status__in=["queued", "running"]).exists(),
        timeout=240,
        jobs=[job],
        message="the replay's retry after the kill after the commit",
    )
    assert Batch.objects.get(pk=replay.pk).attempt >= 2
    assert Batch.objects.get(pk=batch.pk).replaced_by_id == replay.pk
    # the killed attempt's files were live at its snapshot; its retry's snapshot removed them
    assert killed and not killed & _live(sink)

    # 3. a backfill over every committed item
    ids = sorted(item_of)
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[-1], reason="rewrite")
    drive(
        lambda: backfill.batches.exists()
        and not backfill.batches.exclude(status=BatchStatus.SUCCEEDED).exists(),
        timeout=240,
        jobs=[job],
        message="the backfill",
    )
    assert_each_row_exactly_once_at_every_snapshot(sink, items=4)
    assert latest_rows(sink) == expected_rows(range(4))
    tokens = [int(s.summary["tidemark.token"]) for s in load(sink).snapshots()]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
