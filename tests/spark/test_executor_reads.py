"""The executor-side readers' plans (pure logic) and their errors: a Kafka batch's ranges cut by a
row budget, an object-store batch's objects grouped by a byte budget, and an object that fails on
the executor (its footer read fine on the driver) failing the batch with the reader's message."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workers.spark.errors import BatchError, ReadError
from workers.spark.run import run_batch
from workers.spark.sources.kafka import split_ranges
from workers.spark.sources.object_store import group_by_bytes


def test_kafka_ranges_are_cut_by_the_row_budget_and_interleaved():
    assert split_ranges({0: (0, 7), 1: (10, 13)}, 3) == [
        [0, 0, 3],
        [1, 10, 13],
        [0, 3, 6],
        [0, 6, 7],
    ]
    assert split_ranges({0: (5, 6)}, 200_000) == [[0, 5, 6]]
    with pytest.raises(ReadError, match="partition_rows"):
        split_ranges({0: (0, 1)}, 0)


def test_objects_are_grouped_in_order_by_the_byte_budget():
    assert group_by_bytes(["a", "b", "c", "d"], [40, 50, 20, 200], 100) == [
        ["a", "b"],
        ["c"],
        ["d"],  # bigger than the budget: a partition of its own
    ]
    assert group_by_bytes(["a", "b"], [0, 0], 1) == [["a", "b"]]


def test_an_object_that_fails_on_the_executor_fails_the_batch_with_the_readers_message(
    spark, tmp_path
):
    good, bad = tmp_path / "good.parquet", tmp_path / "bad.parquet"
    for path in (good, bad):
        pq.write_table(pa.table({"order_id": list(range(100))}), path, compression="none")
    body = bytearray(bad.read_bytes())
    body[4:40] = b"\xff" * 36  # the first page header: the footer (read when planning) is intact
    bad.write_bytes(bytes(body))
    spec = {
        "job": "objects",
        "batch_id": 7,
        "kind": "incremental",
        "lower": 1,
        "upper": 3,
        "items": [f"file://{good}", f"file://{bad}"],
        "format": "parquet",
        "processor": "passthrough",
        "params": {},
        "sink": {"kind": "files", "path": str(tmp_path / "sink")},
        "source": {
            "kind": "object_store",
            "format": "parquet",
            "objects": [{"location": f"file://{p}", "size": None} for p in (good, bad)],
        },
    }
    with pytest.raises(BatchError) as failed:
        run_batch(spark, spec)
    assert failed.value.type == "ReadError" and failed.value.stage == "read"
    assert failed.value.message.startswith(f"cannot read parquet object file://{bad}: ")
    assert not (tmp_path / "sink").exists() or not list((tmp_path / "sink").rglob("*.parquet"))
