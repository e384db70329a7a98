"""Restatements found by discovery: a file rewritten after registration is read again by every job
that committed it, its old rows replaced in the sink (each source row once), without a person.

Batches run in this process through the real lifecycle and fence on the session's SparkSession
(tests/test_exactly_once.py); the fence opens its own connection, so these tests commit."""

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inventory.models import Asset, Backfill, Watermark
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.jobs import job_create
from tests.test_exactly_once import drain, sink_rows

pytestmark = pytest.mark.django_db(transaction=True)


def _write(path, rows):
    keys, values = zip(*rows, strict=True)
    pq.write_table(
        pa.table({"key": pa.array(keys, pa.int64()), "v": pa.array(values, pa.string())}), path
    )
    past = time.time() - 600  # complete: older than any settle time
    os.utime(path, (past, past))


def test_a_file_rewritten_after_it_was_committed_is_restated_and_its_rows_replaced(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for item in range(4):
        _write(landing / f"{item:03d}.parquet", [(item * 10 + j, f"v{item}") for j in range(3)])
    connector = connector_create(name="rewritten-src", kind="files", config={"path": str(landing)})
    sink = {"kind": "files", "path": str(tmp_path / "sink")}
    job = job_create(
        name="rewritten", connector=connector, batch_weight=10**9, max_items=2, sink=sink
    )
    other = job_create(name="rewritten-later", connector=connector, batch_weight=10**9, max_items=2)
    assert discover(connector) == 4
    drain(spark, job)
    before = sink_rows(spark, sink)
    assert len(before) == 12
    position = Watermark.objects.get(job=job).position

    # file 1 is rewritten in place: one row changed, one gone, one new
    _write(landing / "001.parquet", [(10, "w1"), (11, "w1"), (19, "w1")])
    assert discover(connector) == 0  # nothing new to register: the change is a restatement
    restated = Backfill.objects.get(job=job)
    assert restated.created_by == "tidemark"
    assert "001.parquet" in restated.reason
    # the job that has committed nothing yet reads the new content when it gets there
    assert not Backfill.objects.filter(job=other).exists()
    changed = Asset.objects.get(location=str(landing / "001.parquet"))
    assert changed.extra["restated"] == [restated.pk]

    drain(spark, job)
    after = sink_rows(spark, sink)
    expected = sorted(
        [r for r in before if not 10 <= r[0] < 20] + [(10, "w1"), (11, "w1"), (19, "w1")]
    )
    assert after == expected  # each source row once, the rewritten file's old rows gone
    assert Watermark.objects.get(job=job).position == position

    discover(connector)  # restated once
    assert Backfill.objects.filter(job=job).count() == 1
