"""A small files job driven by hand in this process: `make_files_job` lands parquet items and
creates the job; `run_spark`, `run_and_commit` and `drain` run its batches through the real
lifecycle and the real publish fence on the session's SparkSession; `expire_and_reap` plays a dead
worker; `sink_rows` and `expected_rows` read the sink and say what it should hold."""

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from django.utils import timezone

from inventory.models import Asset, Batch
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from inventory.services.jobs import job_create
from tests.support.sink_database import sink_cursor
from workers import specs
from workers.spark.run import run_batch

ROWS_PER_ITEM = 3


def source_rows(item: int) -> list[tuple[int, str]]:
    return [(item * 100 + j, f"v{item}") for j in range(ROWS_PER_ITEM)]


def land_item(connector, landing: Path, item: int) -> Asset:
    """Item `item`'s parquet file (its source_rows) in `landing`, registered on `connector`."""
    path = landing / f"{item:03d}.parquet"
    keys, values = zip(*source_rows(item), strict=True)
    pq.write_table(
        pa.table({"key": pa.array(keys, pa.int64()), "v": pa.array(values, pa.string())}), path
    )
    return Asset.objects.create(
        connector=connector, location=str(path), weight=1, extra={"n": item}
    )


def make_files_job(tmp_path: Path, name: str, sink: dict, *, items: int, max_items: int = 2):
    landing = tmp_path / f"landing-{name}"
    landing.mkdir()
    connector = connector_create(name=f"{name}-src", kind="files", config={"path": str(landing)})
    for item in range(items):
        land_item(connector, landing, item)
    job = job_create(
        name=name,
        connector=connector,
        batch_weight=100,
        max_items=max_items,
        sink=sink,
        retry_backoff_seconds=0,
        max_attempts=100,
    )
    item_of = {a.pk: a.extra["n"] for a in Asset.objects.filter(connector=connector).order_by("pk")}
    return job, item_of


def run_spark(spark, batch: Batch) -> dict:
    return run_batch(spark, specs.batch_spec(batch=Batch.objects.get(pk=batch.pk)))


def run_and_commit(spark, batch: Batch) -> None:
    result = run_spark(spark, batch)
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result=result)


def drain(spark, job) -> None:
    while (batch := lifecycle.batch_acquire(job=job, worker="test")) is not None:
        run_and_commit(spark, batch)


def expire_and_reap(batch: Batch) -> None:
    """The worker of `batch` is gone: its lease runs out and the reaper fails the attempt."""
    Batch.objects.filter(pk=batch.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    lifecycle.batches_reap_expired()


def sink_rows(spark, sink: dict) -> list[tuple[int, str]]:
    if sink["kind"] == "files":
        if not list(Path(sink["path"]).glob("batch_id=*")):
            return []
        df = spark.read.parquet(sink["path"])
        return sorted((r["key"], r["v"]) for r in df.select("key", "v").collect())
    with sink_cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [f'"{sink["table"]}"'])
        if cursor.fetchone()[0] is None:
            return []  # no batch has written yet
        cursor.execute(f'SELECT key, v FROM "{sink["table"]}" ORDER BY key')
        return sorted(cursor.fetchall())


def expected_rows(items) -> list[tuple[int, str]]:
    return sorted(row for item in items for row in source_rows(item))
