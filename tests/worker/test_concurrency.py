"""Many batches per warm session: one worker process (threads pool) runs batches of different jobs
at the same time on its one SparkSession, and a lost lease stops only that batch's Spark jobs."""

import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.utils import timezone

import tests.support.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import Batch, BatchStatus
from inventory.services import dispatch, scheduling
from inventory.services.connectors import connector_create
from inventory.sources import files
from tests.support.factories import make_job
from tests.support.worker_fixtures import WorkerProcess, read_sink, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def threads_worker(worker_env, worker_log_dir, monkeypatch):
    """A worker of the default kind (threads pool, 2 batches at once) on a queue of its own."""
    from controlplane.celery import app

    queue = f"tidemark-threads-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(app.conf, "CELERY_TASK_DEFAULT_QUEUE", queue)
    worker = WorkerProcess(
        env={**worker_env, "CELERY_QUEUE": queue, "TIDEMARK_BATCHES_PER_WORKER": "2"},
        queue=queue,
        name="threads",
        log_dir=worker_log_dir,
        concurrency=2,
        pool="threads",
    )
    yield worker.start()
    worker.stop()


def _slow_job(tmp_path: Path, name: str, rows: int):
    landing = tmp_path / name
    landing.mkdir()
    pq.write_table(
        pa.table({"order_id": pa.array(range(rows), pa.int64())}), landing / "part.parquet"
    )
    connector = connector_create(
        name=f"{name}-src", kind="files", config={"path": str(landing), "settle_seconds": 0}
    )
    assert files.directory_discover(connector=connector) == 1
    marker = tmp_path / f"{name}.times"
    job = make_job(
        connector=connector,
        name=name,
        batch_weight=10**9,
        processor="test_slow_rows",
        params={"marker": str(marker), "row_seconds": 0.05},
        sink={"kind": "files", "path": str(tmp_path / f"sink-{name}")},
        lease_seconds=6,
        retry_backoff_seconds=600,
    )
    return job, marker


def _times(marker: Path) -> list[float]:
    return [float(t) for t in marker.read_text().split()] if marker.exists() else []


def test_two_jobs_batches_run_at_once_in_one_worker_and_a_lost_lease_stops_only_its_own(
    tmp_path, threads_worker
):
    lost_job, lost_marker = _slow_job(tmp_path, "lost", rows=600)  # 30 s of Spark work
    kept_job, kept_marker = _slow_job(tmp_path, "kept", rows=200)  # 10 s
    (lost_id,) = dispatch.job_run(job=lost_job).planned
    (kept_id,) = dispatch.job_run(job=kept_job).planned

    wait_until(
        lambda: _times(lost_marker) and _times(kept_marker),
        timeout=90,
        message="both batches' Spark work to run",
    )
    lost, kept = Batch.objects.get(pk=lost_id), Batch.objects.get(pk=kept_id)
    assert lost.status == kept.status == BatchStatus.RUNNING
    assert lost.worker == kept.worker  # one worker process, one SparkSession
    assert lost.worker.endswith(f":{threads_worker.proc.pid}")

    # the lost batch's lease is taken away (a stalled worker, reaped)
    Batch.objects.filter(pk=lost_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dispatch, "dispatch", lambda ids: None)  # no retry is sent
        assert scheduling.leases_reap() == [lost_id]
    wait_until(
        lambda: f"batch {lost_id} attempt 1: stale" in threads_worker.log(),
        timeout=60,
        message="the lost batch to stop",
    )

    wait_until(
        lambda: Batch.objects.get(pk=kept_id).status == BatchStatus.SUCCEEDED,
        timeout=120,
        message="the other batch to commit",
    )
    kept = Batch.objects.get(pk=kept_id)
    assert kept.attempt == 1 and kept.result["rows_out"] == 200
    assert sorted(r["order_id"] for r in read_sink(tmp_path / "sink-kept")) == list(range(200))
    # the lost batch's Spark job was cancelled (a Python worker finishes the chunk of rows it
    # holds), while the other batch's work ran on to its end
    assert len(_times(lost_marker)) < 600
    assert _times(kept_marker)[-1] > _times(lost_marker)[-1] + 1
    assert read_sink(tmp_path / "sink-lost") == []
    assert Batch.objects.get(pk=lost_id).status == BatchStatus.FAILED
