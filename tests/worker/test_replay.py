"""Replays leave sinks unchanged; `coalesce` keeps stored values where new ones are null.

The PostgreSQL sink writes into the tests' sink database (never Tidemark's own): the worker's
environment names it in WORKER_SINK_ENV (tests/support/worker_fixtures.py). The files job runs with the spark-submit executor.
"""

import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inventory.models import Asset, Backfill, BackfillStatus, Batch, BatchStatus, Watermark
from inventory.services import dispatch
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create
from inventory.sources import files
from tests.support.factories import make_job
from tests.support.sink_database import sink_cursor
from tests.support.worker_fixtures import WORKER_SINK_ENV, read_sink, wait_until
from workers import execution, executors, specs

pytestmark = pytest.mark.django_db(transaction=True)


def _customers_file(path: Path, hour: int, rows: list[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ids, emails, names, cities = zip(*rows, strict=True)
    pq.write_table(
        pa.table(
            {
                "order_id": pa.array([hour * 100 + n for n in range(len(rows))], pa.int64()),
                "customer_id": pa.array(ids, pa.int64()),
                "amount": pa.array([1.0] * len(rows), pa.float64()),
                "event_time": pa.array(
                    [datetime(2026, 2, 1, hour, tzinfo=UTC)] * len(rows), pa.timestamp("us", "UTC")
                ),
                "email": pa.array(emails, pa.string()),
                "name": pa.array(names, pa.string()),
                "city": pa.array(cities, pa.string()),
            }
        ),
        path,
    )


def _table(name: str) -> list[tuple]:
    with sink_cursor() as cursor:
        cursor.execute(f'SELECT customer_id, email, name, city FROM "{name}" ORDER BY customer_id')
        return cursor.fetchall()


def _settled(job, last):
    busy = Batch.objects.filter(job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING])
    return Watermark.objects.get(job=job).value == last and not busy.exists()


def test_coalesce_keeps_stored_values_and_a_backfill_replay_leaves_the_table_unchanged(
    tmp_path, celery_worker
):
    landing = tmp_path / "landing"
    _customers_file(
        landing / "1.parquet",
        1,
        [(1, "ann@example.com", "Ann", "Oslo"), (2, "bo@x.org", None, "Lyon")],
    )
    _customers_file(landing / "2.parquet", 2, [(1, None, "Ann B", None), (2, None, "Bo", None)])
    connector = connector_create(name="customers-src", kind="files", config={"path": str(landing)})
    files.directory_discover(connector=connector)
    table = f"customers_{uuid.uuid4().hex[:8]}"
    job = make_job(
        connector=connector,
        name="customers-current",
        batch_weight=10**9,
        max_items=1,  # one file per batch: the second batch is a partial update of the first
        processor="customers_latest",
        sink={
            "kind": "postgres",
            "dsn_env": WORKER_SINK_ENV,
            "table": table,
            "key": ["customer_id"],
            "mode": "coalesce",
        },
    )
    first, last = (
        Asset.objects.filter(connector=connector).order_by("pk").values_list("pk", flat=True)
    )
    dispatch.job_run(job=job)
    wait_until(lambda: _settled(job, last), timeout=120, message="both batches")

    expected = [(1, "ann@example.com", "Ann B", "Oslo"), (2, "bo@x.org", "Bo", "Lyon")]
    assert _table(table) == expected

    backfill = backfill_create(job=job, range_start=first, range_end=last, reason="replay test")
    dispatch.backfills_pace()
    wait_until(
        lambda: Backfill.objects.get(pk=backfill.pk).status == BackfillStatus.COMPLETED,
        timeout=120,
        message="the replay backfill",
    )
    assert Batch.objects.filter(backfill=backfill, status=BatchStatus.SUCCEEDED).count() == 2
    assert _table(table) == expected


def test_slow_rerunning_a_succeeded_files_batch_through_spark_submit_leaves_the_sink_unchanged(
    tmp_path, celery_worker
):
    landing, sink = tmp_path / "landing", tmp_path / "sink"
    _customers_file(landing / "a.parquet", 1, [(1, "a@x", "A", None), (2, None, "B", "C")])
    _customers_file(landing / "b.parquet", 2, [(3, "c@x", None, None)])
    connector = connector_create(
        name="submit-src", kind="files", config={"path": str(landing), "lineage": True}
    )
    files.directory_discover(connector=connector)
    job = make_job(
        connector=connector,
        name="submit-copy",
        batch_weight=10**9,
        executor="submit",
        sink={"kind": "files", "path": str(sink)},
    )
    last = Asset.objects.filter(connector=connector).order_by("-pk").first().pk
    dispatch.job_run(job=job)
    wait_until(lambda: _settled(job, last), timeout=180, message="the spark-submit batch")
    batch = Batch.objects.get(job=job)
    assert batch.result["rows_out"] == 3
    before = sorted((r["order_id"], r["customer_id"]) for r in read_sink(sink))
    assert len(before) == 3
    files_before = sorted(p.relative_to(sink) for p in sink.rglob("*.parquet"))

    # its spec once more through the fence: a finished attempt may not touch the published output
    spec = specs.batch_spec(batch=batch)
    with pytest.raises(execution.BatchFailure, match="may not publish"):
        executors.run_submit(spec, threading.Event())
    assert sorted((r["order_id"], r["customer_id"]) for r in read_sink(sink)) == before

    # the same batch once more without the control plane (run by hand): replaced, not added to
    spec = {key: value for key, value in spec.items() if key != "fence"}
    result = executors.run_submit(spec, threading.Event())
    assert result["rows_out"] == 3
    assert sorted((r["order_id"], r["customer_id"]) for r in read_sink(sink)) == before
    assert len(sorted(p.relative_to(sink) for p in sink.rglob("*.parquet"))) == len(files_before)
