"""Faults through real worker processes: a worker killed mid-batch, a lease taken over mid-batch.

Both hold a batch inside the `test_gate` processor until the test opens its gate file.
"""

import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

import tests.support.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import Batch, BatchAttempt, BatchStatus, Watermark, WatermarkEvent
from inventory.services import dispatch, lifecycle, scheduling
from inventory.services.connectors import connector_create
from inventory.sources import files
from tests.support.factories import make_job
from tests.support.worker_fixtures import read_sink, wait_until, write_orders

pytestmark = pytest.mark.django_db(transaction=True)


def _gated_job(tmp_path: Path, name: str, **options):
    landing, sink, gates = tmp_path / "landing", tmp_path / "sink", tmp_path / "gates"
    gates.mkdir()
    write_orders(landing / "a.parquet", first_id=1, count=8)
    write_orders(landing / "b.parquet", first_id=101, count=4)
    connector = connector_create(name=f"{name}-src", kind="files", config={"path": str(landing)})
    files.directory_discover(connector=connector)
    job = make_job(
        connector=connector,
        name=name,
        batch_weight=10**9,
        processor="test_gate",
        params={"gate": str(gates / "open"), "timeout": 120},
        sink={"kind": "files", "path": str(sink)},
        **options,
    )
    return job, gates, sink


def _inside_processor(gates: Path, batch_id: int) -> int | None:
    marker = gates / f"started-{batch_id}"
    if not marker.exists():
        return None
    lines = marker.read_text().split()
    return int(lines[-1]) if lines else None


def test_slow_a_worker_killed_mid_batch_is_reaped_and_attempt_2_writes_every_row_once(
    tmp_path, celery_worker
):
    job, gates, sink = _gated_job(
        tmp_path, "killed-mid-batch", lease_seconds=5, retry_backoff_seconds=0
    )
    (batch_id,) = dispatch.job_run(job=job).planned
    pid = wait_until(lambda: _inside_processor(gates, batch_id), timeout=90, message="batch start")
    batch = Batch.objects.get(pk=batch_id)
    assert batch.status == BatchStatus.RUNNING and batch.worker.endswith(f":{pid}")

    os.kill(pid, signal.SIGKILL)  # the pool process running the batch, mid-processor
    (gates / "open").touch()  # the next attempt goes straight through

    # no heartbeat any more: the lease runs out, then the reaper step takes the batch back
    wait_until(
        lambda: Batch.objects.get(pk=batch_id).lease_expires_at < timezone.now(),
        timeout=30,
        message="the lease to expire",
    )
    assert scheduling.leases_reap() == [batch_id]
    wait_until(
        lambda: Batch.objects.get(pk=batch_id).status == BatchStatus.SUCCEEDED,
        timeout=120,
        message="attempt 2 to succeed",
    )

    batch = Batch.objects.get(pk=batch_id)
    assert batch.attempt == 2 and not batch.worker.endswith(f":{pid}")
    attempts = list(
        BatchAttempt.objects.filter(batch=batch).order_by("number").values("number", "outcome")
    )
    assert attempts == [
        {"number": 1, "outcome": "failed"},
        {"number": 2, "outcome": "succeeded"},
    ]
    assert BatchAttempt.objects.get(batch=batch, number=1).error["type"] == "LeaseExpired"
    rows = read_sink(sink)
    assert sorted(r["order_id"] for r in rows) == [*range(1, 9), *range(101, 105)]
    events = WatermarkEvent.objects.filter(watermark__job=job)
    assert [(e.source, e.batch_id) for e in events] == [("batch", batch_id)]
    assert Watermark.objects.get(job=job).value == batch.last_item


def test_a_worker_whose_lease_was_taken_over_does_not_commit(tmp_path, celery_worker):
    job, gates, sink = _gated_job(
        tmp_path, "taken-over", lease_seconds=5, retry_backoff_seconds=0, max_attempts=5
    )
    (batch_id,) = dispatch.job_run(job=job).planned
    wait_until(lambda: _inside_processor(gates, batch_id), timeout=90, message="batch start")
    first_worker = Batch.objects.get(pk=batch_id).worker

    # the lease is lost while Spark works (a stalled worker): another worker takes the batch over
    Batch.objects.filter(pk=batch_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.MonkeyPatch.context() as patch:
        # the intruder is this test, not a task
        patch.setattr(dispatch, "dispatch", lambda ids: None)
        assert scheduling.leases_reap() == [batch_id]
    intruder = lifecycle.batch_start(batch_id=batch_id, worker="intruder:1")
    assert intruder.attempt == 2

    (gates / "open").touch()
    wait_until(
        lambda: f"batch {batch_id} attempt 1: stale" in celery_worker.log(),
        timeout=60,
        message="attempt 1 to give up",
    )
    batch = Batch.objects.get(pk=batch_id)
    assert (batch.status, batch.attempt, batch.worker) == (BatchStatus.RUNNING, 2, "intruder:1")
    assert not WatermarkEvent.objects.filter(watermark__job=job).exists()
    assert first_worker != "intruder:1"

    # the intruder stalls too; the batch goes back to the queue and a worker finishes it:
    # whatever attempt 1 wrote before it gave up is replaced, not added to
    lifecycle.batch_fail(batch_id=batch_id, attempt=2, error={"type": "Test", "message": "stalled"})
    dispatch.batches_dispatch_due()
    wait_until(
        lambda: Batch.objects.get(pk=batch_id).status == BatchStatus.SUCCEEDED,
        timeout=60,
        message="attempt 3 to succeed",
    )
    assert Batch.objects.get(pk=batch_id).attempt == 3
    rows = read_sink(sink)
    assert sorted(r["order_id"] for r in rows) == [*range(1, 9), *range(101, 105)]
    assert WatermarkEvent.objects.filter(watermark__job=job).count() == 1
