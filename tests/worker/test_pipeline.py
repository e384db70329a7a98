"""End to end through a real Celery worker process (Redis broker, this test database, PySpark).

Only the new files are processed; a run with nothing new plans nothing and sends nothing;
a malformed file kills its own batch after max_attempts while another job goes on.
"""

from pathlib import Path

import pytest

import tests.support.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import Asset, Batch, BatchAttempt, BatchStatus, Watermark, WatermarkEvent
from inventory.services import dispatch
from inventory.services.connectors import connector_create
from inventory.sources import files
from tests.support.factories import execute_refused_before_spark, make_job
from tests.support.worker_fixtures import read_sink, wait_until, write_orders

pytestmark = pytest.mark.django_db(transaction=True)


def _connector(name: str, landing: Path, **config):
    landing.mkdir(parents=True, exist_ok=True)
    return connector_create(
        name=name, kind="files", config={"path": str(landing), "lineage": True, **config}
    )


def _settled(job, *, last_item: int):
    """The job's watermark reached `last_item` and nothing of it is queued or running."""
    watermark = Watermark.objects.get(job=job)
    busy = Batch.objects.filter(job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING])
    return watermark.value == last_item and not busy.exists()


def _source_files(rows) -> set[str]:
    return {Path(row["_tm_source_file"]).name for row in rows}


def test_an_incremental_run_processes_exactly_the_new_files(tmp_path, celery_worker):
    landing, sink = tmp_path / "landing", tmp_path / "sink"
    for n in range(3):
        write_orders(landing / f"orders-{n}.parquet", first_id=n * 100, count=10, day=n + 1)
    connector = _connector("pipeline-orders", landing)
    assert files.directory_discover(connector=connector) == 3
    job = make_job(
        connector=connector,
        name="pipeline-copy",
        batch_weight=10**9,
        max_items=2,
        sink={"kind": "files", "path": str(sink)},
    )

    first = dispatch.job_run(job=job)
    assert len(first.planned) == 1  # max_concurrency 1: the worker plans the next one itself
    last = Asset.objects.filter(connector=connector).order_by("-id").first()
    wait_until(lambda: _settled(job, last_item=last.pk), timeout=90, message="first run")

    rows = read_sink(sink)
    assert len(rows) == 30 and len({r["order_id"] for r in rows}) == 30
    first_batches = list(Batch.objects.filter(job=job).order_by("span"))
    assert [b.item_count for b in first_batches] == [2, 1]
    assert all(b.status == BatchStatus.SUCCEEDED and b.attempt == 1 for b in first_batches)
    assert first_batches[0].result["rows_in"] == 20 and first_batches[0].result["rows_out"] == 20

    # two new files arrive: the next run reads exactly those
    for n in (3, 4):
        write_orders(landing / f"orders-{n}.parquet", first_id=n * 100, count=5, day=n + 1)
    assert files.directory_discover(connector=connector) == 2
    dispatch.job_run(job=job)
    last = Asset.objects.filter(connector=connector).order_by("-id").first()
    wait_until(lambda: _settled(job, last_item=last.pk), timeout=60, message="second run")

    new_batches = list(Batch.objects.filter(job=job).exclude(pk__in=[b.pk for b in first_batches]))
    assert len(new_batches) == 1 and new_batches[0].item_count == 2
    new_rows = [r for r in read_sink(sink) if r["_tm_batch_id"] == new_batches[0].pk]
    assert _source_files(new_rows) == {"orders-3.parquet", "orders-4.parquet"}
    assert len(read_sink(sink)) == 40
    assert WatermarkEvent.objects.filter(watermark__job=job).count() == 3

    # nothing new: the scheduled run (through the worker) plans nothing, so Spark does nothing
    from workers.tasks import run_job

    batches_before = Batch.objects.filter(job=job).count()
    runs_before = celery_worker.log().count("tidemark.run_job[")
    dispatch.send(run_job, job.pk)
    wait_until(
        lambda: celery_worker.log().count("tidemark.run_job[") >= runs_before + 2,
        timeout=30,
        message="the run_job task to be received and finish",
    )
    assert Batch.objects.filter(job=job).count() == batches_before
    assert dispatch.job_run(job=job).dispatched == []


def test_a_malformed_file_kills_its_batch_after_max_attempts_while_another_job_goes_on(
    tmp_path, celery_worker
):
    bad_landing, good_landing = tmp_path / "bad", tmp_path / "good"
    bad_landing.mkdir()
    (bad_landing / "broken.parquet").write_bytes(b"this is not parquet at all" * 10)
    write_orders(good_landing / "fine.parquet", first_id=1, count=5)
    bad_connector = _connector("malformed-src", bad_landing)
    good_connector = _connector("healthy-src", good_landing)
    files.directory_discover(connector=bad_connector)
    files.directory_discover(connector=good_connector)
    bad_job = make_job(
        connector=bad_connector,
        name="reads-garbage",
        batch_weight=10**9,
        max_attempts=3,
        retry_backoff_seconds=1,
        sink={"kind": "files", "path": str(tmp_path / "bad-out")},
    )
    good_job = make_job(
        connector=good_connector,
        name="reads-fine",
        batch_weight=10**9,
        sink={"kind": "files", "path": str(tmp_path / "good-out")},
    )

    dispatch.job_run(job=bad_job)
    dispatch.job_run(job=good_job)

    bad_batch = wait_until(
        lambda: Batch.objects.filter(job=bad_job, status=BatchStatus.DEAD).first(),
        timeout=90,
        message="the malformed batch to die",
    )
    assert bad_batch.attempt == 3
    assert bad_batch.error["stage"] == "read"
    assert "broken.parquet" in bad_batch.error["message"] + bad_batch.error.get("detail", "")
    outcomes = list(
        BatchAttempt.objects.filter(batch=bad_batch)
        .order_by("number")
        .values_list("number", "outcome")
    )
    assert outcomes == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert Watermark.objects.get(job=bad_job).value is None

    good_batch = Batch.objects.get(job=good_job)
    assert good_batch.status == BatchStatus.SUCCEEDED
    assert len(read_sink(tmp_path / "good-out")) == 5


def test_a_batch_of_files_in_different_formats_without_a_connector_format_fails_before_spark(
    tmp_path,
):
    """With no `format`, the batch's format was guessed from its first file with a known suffix:
    a .json file in the same batch was then read as CSV (or the reverse), and two batches of one
    connector could write different formats' rows to one sink. Mixed suffixes fail the batch
    naming them; one suffix is read in its format."""
    from inventory.services import lifecycle

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text("id\n1\n")
    (landing / "b.json").write_text('{"id": 2}\n')
    connector = _connector("mixed", landing, settle_seconds=0)
    assert files.directory_discover(connector=connector) == 2
    job = make_job(connector=connector, sink={"kind": "files", "path": str(tmp_path / "out")})
    (batch,) = lifecycle.batches_plan(job=job, limit=1)

    stored = execute_refused_before_spark(batch)
    assert stored.status in (BatchStatus.FAILED, BatchStatus.DEAD)
    message = stored.error["message"]
    assert "a.csv" in message and "b.json" in message and "format" in message, stored.error
