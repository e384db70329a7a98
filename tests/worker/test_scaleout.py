"""Scale-out is real: two Celery workers share one job's batches; a worker whose SPARK_MASTER is a
Spark standalone cluster (master + worker started from the pyspark distribution on loopback)."""

from pathlib import Path

import pytest

import tests.support.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import Asset, Batch, BatchStatus, Watermark, WatermarkEvent
from inventory.services import dispatch
from inventory.services.connectors import connector_create
from inventory.sources.files import directory_discover
from tests.support.factories import make_job
from tests.support.spark_cluster import spark_standalone  # noqa: F401 - fixture
from tests.support.worker_fixtures import read_sink, wait_until, write_orders

pytestmark = pytest.mark.django_db(transaction=True)


def _files_job(tmp_path: Path, name: str, files: int, **options):
    landing = tmp_path / "landing"
    for n in range(files):
        write_orders(landing / f"part-{n}.parquet", first_id=n * 10, count=10)
    connector = connector_create(name=f"{name}-src", kind="files", config={"path": str(landing)})
    directory_discover(connector=connector)
    job = make_job(
        connector=connector,
        name=name,
        batch_weight=10**9,
        max_items=1,
        sink={"kind": "files", "path": str(tmp_path / "sink")},
        **options,
    )
    last = Asset.objects.filter(connector=connector).order_by("-pk").first().pk
    return job, last


def _settled(job, last):
    busy = Batch.objects.filter(job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING])
    return Watermark.objects.get(job=job).value == last and not busy.exists()


def test_slow_two_workers_share_one_jobs_batches(tmp_path, celery_worker, start_worker):
    start_worker(name="second")
    job, last = _files_job(
        tmp_path,
        "shared-job",
        files=6,
        max_concurrency=2,
        processor="test_gate",
        params={"timeout": 1.5},  # no gate file: each batch takes 1.5 s in its processor
    )
    assert len(dispatch.job_run(job=job).planned) == 2
    wait_until(lambda: _settled(job, last), timeout=180, message="all six batches")

    done = list(Batch.objects.filter(job=job).order_by("span"))
    assert len(done) == 6 and all(b.status == BatchStatus.SUCCEEDED for b in done)
    assert all(b.attempt == 1 for b in done)
    assert len({b.worker for b in done}) == 2  # both workers did work
    for before, after in zip(done, done[1:], strict=False):  # contiguous, no overlap
        assert before.span.upper == after.span.lower
    rows = read_sink(tmp_path / "sink")
    assert sorted(r["order_id"] for r in rows) == list(range(60))
    assert Watermark.objects.get(job=job).position == last + 1
    assert WatermarkEvent.objects.filter(watermark__job=job).count() >= 1


def test_slow_a_batch_runs_on_a_spark_standalone_cluster(
    tmp_path,
    spark_standalone,  # noqa: F811
    start_worker,
):
    worker = start_worker(
        name="standalone",
        env={
            "SPARK_MASTER": spark_standalone["master"],
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF": "spark.executor.memory=512m,spark.cores.max=1",
        },
    )
    assert f"warm SparkSession ready on {spark_standalone['master']}" in worker.log()
    job, last = _files_job(tmp_path, "on-cluster", files=2)
    dispatch.job_run(job=job)
    wait_until(lambda: _settled(job, last), timeout=180, message="the batches on the cluster")

    rows = read_sink(tmp_path / "sink")
    assert sorted(r["order_id"] for r in rows) == list(range(20))
    cluster = spark_standalone["state"]()
    apps = cluster["activeapps"] + cluster["completedapps"]
    assert any(app["name"] == "tidemark" for app in apps)
    assert cluster["aliveworkers"] == 1
