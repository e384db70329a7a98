"""The tables bench/bench_table_reads.py times: the hand-built Hudi table is one hudi-rs and the
worker's Hudi reader both read whole, and the Iceberg table's plan covers every row."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from bench import bench_table_reads as bench
from bench import table_reads_data as data

COMMITS = 3


@pytest.fixture(scope="module")
def hudi_table(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench-hudi") / "transactions_hudi"
    return path, data.write_hudi(path, 2, COMMITS)


def _library_rows(path) -> pa.Table:
    from hudi import HudiTableBuilder

    return pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())


def test_hudi_rs_reads_the_hand_built_table_whole(hudi_table):
    path, written = hudi_table
    assert written["files"] == COMMITS * data.FILES_PER_COMMIT
    table = _library_rows(path)
    assert table.num_rows == written["rows"] > 0
    # every id once, and each row's meta columns as Spark's writer sets them
    ids = table.column("txn_id")
    assert pc.count_distinct(ids).as_py() == written["rows"]
    assert pc.min(ids).as_py() == 0 and pc.max(ids).as_py() == written["rows"] - 1
    assert table.column("_hoodie_record_key").to_pylist() == [str(i) for i in ids.to_pylist()]
    assert set(table.column("_hoodie_partition_path").to_pylist()) == {
        f"event_date={d}" for d in ("2025-11-01", "2025-11-02", "2025-11-03")
    }
    assert table.schema.field("amount").type == pa.decimal128(12, 2)
    assert pc.min(table.column("amount")).as_py() >= 0


def test_the_batch_plan_names_every_instant_and_file_slice(hudi_table):
    path, written = hudi_table
    source = bench.hudi_spec(str(path))["source"]
    assert (
        source["instants"]
        == source["reads"]
        == [
            "20251101233000000",
            "20251102233000000",
            "20251103233000000",
        ]
    )
    assert source["as_of"] == "20251103233000000"
    assert len(source["slices"]) == written["files"]
    assert all(s["base"].endswith(f"_{s['instant']}.parquet") for s in source["slices"])


def test_the_worker_reads_the_batch_as_hudi_rs_reads_the_table(hudi_table, spark):
    from workers.spark.sources import hudi as reader

    path, written = hudi_table
    seconds, rows = bench.tidemark_read(spark, reader, bench.hudi_spec(str(path)))
    assert rows == written["rows"]
    df = reader.read(spark, bench.hudi_spec(str(path)))
    worker = sorted((r["txn_id"], r["amount"]) for r in df.select("txn_id", "amount").collect())
    library = _library_rows(path)
    assert worker == sorted(
        zip(library.column("txn_id").to_pylist(), library.column("amount").to_pylist(), strict=True)
    )


def test_the_iceberg_plan_covers_every_row(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    written = data.write_iceberg(tmp_path, 2, COMMITS)
    source = bench.iceberg_spec(written["catalog"])["source"]
    table = SqlCatalog("bench", **written["catalog"]).load_table("bench.transactions")
    assert len(source["snapshots"]) == COMMITS
    assert sorted(f["path"] for f in source["files"]) == sorted(
        t.file.file_path for t in table.scan().plan_files()
    )
    # each file named with the snapshot that added it: one commit a day, its own files
    by_snapshot = {}
    for file in source["files"]:
        by_snapshot.setdefault(file["snapshot"], []).append(file["path"])
    assert sorted(by_snapshot) == sorted(source["snapshots"])
    rows = sum(t.file.record_count for t in table.scan().plan_files())
    assert rows == written["rows"] == table.scan().to_arrow().num_rows
