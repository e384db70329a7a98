"""An output nobody recorded (a worker killed after its sink committed and before the fence's
transaction did) leaves the sink when the batch that rewrites its items publishes, if its batch
is cancelled, skipped or superseded instead of retried (tidemark_publish_begin, 0052)."""

import shutil
from pathlib import Path

import duckdb
import pytest

from inventory.models import Batch, BatchStatus
from inventory.services import lifecycle
from inventory.services.corrections import watermark_correct
from tests.support import delta_tables, iceberg_tables
from tests.support.files_job import (
    drain,
    expected_rows,
    expire_and_reap,
    make_files_job,
    sink_rows,
    source_rows,
)
from tests.support.iceberg_tables import iceberg_sink
from workers.spark.sinks import write_sink

pytestmark = pytest.mark.django_db(transaction=True)


def _sink(kind, tmp_path, sink_dsn, table):
    if kind == "files":
        return {"kind": "files", "path": str(tmp_path / "out")}
    if kind == "delta":
        return {"kind": "delta", "path": str(tmp_path / "delta")}
    if kind == "iceberg":
        return iceberg_sink(tmp_path)
    return {"kind": "postgres", "dsn_env": sink_dsn, "table": table, "mode": "append"}


def _rows(spark, sink: dict) -> list[tuple[int, str]]:
    """The sink's rows now, read as its own readers read it (a table format: delta-rs or
    pyiceberg, each checked against DuckDB's reader at every version by the helpers)."""
    if sink["kind"] == "delta":
        return delta_tables.rows_at(sink["path"])
    if sink["kind"] == "iceberg":
        return iceberg_tables.latest_rows(sink)
    return sink_rows(spark, sink)


def _each_row_at_most_once_at_every_version(sink: dict) -> None:
    if sink["kind"] == "delta":
        delta_tables.assert_each_row_at_most_once_at_every_version(sink["path"])
    elif sink["kind"] == "iceberg":
        iceberg_tables.assert_each_row_at_most_once_at_every_snapshot(sink)


def _killed_after_the_sink_committed(spark, batch: Batch, sink: dict, item_of: dict) -> None:
    """What a worker killed between the sink's commit and the fence's leaves: the batch's output
    in the sink, no publish recorded, the lease running out."""
    rows = [
        row for asset, item in item_of.items() if asset in batch.span for row in source_rows(item)
    ]
    df = spark.createDataFrame(rows, "key BIGINT, v STRING")
    write_sink(df, sink, batch_id=batch.pk, attempt=batch.attempt)
    expire_and_reap(batch)
    assert Batch.objects.get(pk=batch.pk).published_attempt is None


def _killed_mid_write_and_mid_swap(sink: dict, batch: Batch) -> None:
    """What two more killed attempts of `batch` leave under a files sink's `_staging`, as the
    writer names them: a write that had not published, and an output moved aside by a swap whose
    fence never committed."""
    out = Path(sink["path"])
    for name in (
        f"batch_id={batch.pk}-a2-0123456789ab",
        f"replaced-batch_id={batch.pk}-by-{batch.pk}-a3-ba9876543210",
    ):
        shutil.copytree(out / f"batch_id={batch.pk}", out / "_staging" / name)


@pytest.mark.parametrize("kind", ["files", "postgres", "delta", "iceberg"])
@pytest.mark.parametrize("then", ["cancelled", "skipped then replayed"])
def test_an_unrecorded_output_leaves_when_its_items_are_published_again(
    spark, tmp_path, sink_dsn, kind, then
):
    sink = _sink(kind, tmp_path, sink_dsn, f"unrecorded_{then[:4]}")
    job, item_of = make_files_job(tmp_path, f"unrec-{kind}-{then[:4]}", sink, items=4)
    first = lifecycle.batch_acquire(job=job, worker="w")
    _killed_after_the_sink_committed(spark, first, sink, item_of)
    assert _rows(spark, sink) == expected_rows(i for a, i in item_of.items() if a in first.span)
    if kind == "files":
        _killed_mid_write_and_mid_swap(sink, first)
    if then == "cancelled":
        lifecycle.batch_cancel(batch_id=first.pk, actor="ops", reason="stuck")
        drain(spark, job)
    else:
        Batch.objects.filter(pk=first.pk).update(status=BatchStatus.DEAD)
        lifecycle.batch_skip(batch_id=first.pk, actor="ops", reason="bad file")
        drain(spark, job)
        # the skipped range was never processed: its rows are the unrecorded output's alone
        watermark_correct(
            job=job, position=first.span.lower, actor="ops", reason="reprocess", replay=True
        )
        drain(spark, job)
    assert _rows(spark, sink) == expected_rows(range(4))
    _each_row_at_most_once_at_every_version(sink)
    gone = Batch.objects.get(pk=first.pk)
    assert gone.published_attempt is None and gone.replaced_by_id is not None
    if kind == "files":
        # what the killed attempts left in staging went with the job's next publish (its batch
        # can never publish on those attempts): DuckDB reading the batch directories, as
        # docs/sinks/files.md says to read the sink by glob, and even a glob over the whole
        # sink, see each row once
        assert list((tmp_path / "out" / "_staging").iterdir()) == []
        for pattern in ("batch_id=*/**/*.parquet", "**/*.parquet"):
            read = duckdb.sql(
                f"SELECT key, v FROM read_parquet('{tmp_path / 'out'}/{pattern}')"
            ).fetchall()
            assert sorted(read) == expected_rows(range(4))
