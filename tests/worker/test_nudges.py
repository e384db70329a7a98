"""A Celery message is only a nudge: losing one leaves the batch queued in the database, and the
next nudge (beat's sweep, the requeue step) runs it, through a real worker process."""

import time
from pathlib import Path

import pytest

import tests.support.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import Batch, BatchStatus
from inventory.services import dispatch
from inventory.services.connectors import connector_create
from inventory.sources import files
from tests.support.factories import make_job
from tests.support.worker_fixtures import read_sink, wait_until, write_orders

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_lost_nudge_leaves_the_batch_queued_and_the_next_sweep_runs_it(
    tmp_path: Path, celery_worker, monkeypatch
):
    landing, sink = tmp_path / "landing", tmp_path / "sink"
    write_orders(landing / "a.parquet", first_id=1, count=5)
    connector = connector_create(name="lost-nudge-src", kind="files", config={"path": str(landing)})
    files.directory_discover(connector=connector)
    job = make_job(
        connector=connector,
        name="lost-nudge",
        batch_weight=10**9,
        sink={"kind": "files", "path": str(sink)},
    )

    with monkeypatch.context() as patch:
        patch.setattr(dispatch, "dispatch", lambda job_ids: None)  # the message is lost
        (batch_id,) = dispatch.job_run(job=job).planned
    time.sleep(3)  # the worker is idle: nothing takes the batch
    assert Batch.objects.get(pk=batch_id).status == BatchStatus.QUEUED

    assert dispatch.batches_dispatch_due() == []  # beat's step: nothing to requeue, one nudge
    wait_until(
        lambda: Batch.objects.get(pk=batch_id).status == BatchStatus.SUCCEEDED,
        timeout=90,
        message="the swept batch to commit",
    )
    assert Batch.objects.get(pk=batch_id).attempt == 1
    assert sorted(r["order_id"] for r in read_sink(sink)) == [1, 2, 3, 4, 5]
