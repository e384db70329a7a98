"""A chain of jobs (`job_output` connectors) driven by hand in this process: an upstream files
job with one item (three rows) per batch, a job reading its commits, batches run and committed
through the real lifecycle on the session's SparkSession, and the rows a files sink holds."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from inventory.models import Asset, Batch
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from inventory.services.jobs import job_create
from workers import specs
from workers.spark.run import run_batch

ROWS = 3


def source_rows(item: int) -> list[tuple[int, str]]:
    return [(item * 100 + j, f"v{item}") for j in range(ROWS)]


def expected(items) -> list[tuple[int, str]]:
    return sorted(row for item in items for row in source_rows(item))


def upstream_job(tmp_path: Path, name: str, *, items: int, sink: dict | None = None, **options):
    """A files job with one item (3 rows) per batch and a files sink."""
    landing = tmp_path / f"landing-{name}"
    landing.mkdir()
    connector = connector_create(name=f"{name}-src", kind="files", config={"path": str(landing)})
    for item in range(items):
        path = landing / f"{item:03d}.parquet"
        keys, values = zip(*source_rows(item), strict=True)
        table = pa.table({"key": pa.array(keys, pa.int64()), "v": pa.array(values)})
        pq.write_table(table, path)
        Asset.objects.create(connector=connector, location=str(path), weight=1)
    return job_create(
        name=name,
        connector=connector,
        batch_weight=100,
        max_items=1,
        sink=sink or {"kind": "files", "path": str(tmp_path / f"out-{name}")},
        retry_backoff_seconds=0,
        max_attempts=100,
        **options,
    )


def downstream_job(name: str, upstream, sink: dict, *, max_items: int = 1, **config):
    connector = connector_create(
        name=f"{name}-src", kind="job_output", config={"job": upstream.name, **config}
    )
    return job_create(
        name=name,
        connector=connector,
        batch_weight=10**12,
        max_items=max_items,
        sink=sink,
        retry_backoff_seconds=0,
        max_attempts=100,
    )


def run(spark, batch: Batch) -> dict:
    return run_batch(spark, specs.batch_spec(batch=Batch.objects.get(pk=batch.pk)))


def commit(batch: Batch, result: dict) -> Batch:
    return lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result=result)


def drain(spark, job, *, limit: int | None = None) -> list[Batch]:
    done = []
    while limit is None or len(done) < limit:
        batch = lifecycle.batch_acquire(job=job, worker="test")
        if batch is None:
            break
        commit(batch, run(spark, batch))
        done.append(batch)
    return done


def file_rows(spark, path: Path) -> list[tuple[int, str]]:
    if not list(path.glob("batch_id=*")):
        return []
    return sorted((r["key"], r["v"]) for r in spark.read.parquet(str(path)).collect())
