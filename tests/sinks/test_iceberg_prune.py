"""An upsert into an Iceberg sink reads only the live files whose key bounds admit one of the
batch's keys (workers/spark/iceberg_prune.py), and still keeps each key's newest row once."""

import os

import pytest

from workers.spark.iceberg_catalog import catalog_from
from workers.spark.iceberg_prune import key_ranges, may_hold
from workers.spark.sinks import write_sink

SCHEMA = "key BIGINT, name STRING, v STRING"


def _sink(tmp_path, key) -> dict:
    return {
        "kind": "iceberg",
        "catalog_uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": str(tmp_path / "warehouse"),
        "table": "out.t",
        "mode": "upsert",
        "key": key,
    }


def _table(sink):
    return catalog_from(sink).load_table(("out", "t"))


def _live(sink) -> list:
    return [task.file for task in _table(sink).scan().plan_files()]


def _rows(sink) -> list[tuple]:
    arrow = _table(sink).scan().to_arrow()
    return sorted(zip(*(arrow.column(c).to_pylist() for c in ("key", "name", "v")), strict=True))


def _batch(spark, keys, v):
    return spark.createDataFrame([(k, f"n{k:04d}", v) for k in keys], SCHEMA).coalesce(1)


def test_an_upsert_never_opens_a_file_whose_key_bounds_exclude_the_batch(spark, tmp_path):
    sink = _sink(tmp_path, ["key"])
    write_sink(_batch(spark, range(1, 11), "a"), sink, batch_id=1, job="j")
    write_sink(_batch(spark, range(100, 111), "b"), sink, batch_id=2, job="j")
    far = [f.file_path for f in _live(sink) if "tidemark-b2-" in f.file_path]
    assert far
    # batch 2's file is gone from disk: an upsert that opened it would fail
    hidden = {p: p.removeprefix("file://") + ".hidden" for p in far}
    for path, moved in hidden.items():
        os.rename(path.removeprefix("file://"), moved)
    try:
        write_sink(_batch(spark, [5, 7], "c"), sink, batch_id=3, job="j")
    finally:
        for path, moved in hidden.items():
            os.rename(moved, path.removeprefix("file://"))
    rows = _rows(sink)
    assert [r for r in rows if r[0] in (5, 7)] == [(5, "n0005", "c"), (7, "n0007", "c")]
    assert len(rows) == 21 and len({r[0] for r in rows}) == 21
    assert set(far) <= {f.file_path for f in _live(sink)}  # kept as they were


def test_a_file_is_kept_in_unless_a_key_columns_bounds_rule_it_out(spark, tmp_path):
    sink = _sink(tmp_path, ["key", "name"])
    write_sink(_batch(spark, range(1, 11), "a"), sink, batch_id=1, job="j")
    table = _table(sink)
    schema = table.schema()
    (data_file,) = _live(sink)

    def ranges(keys):
        return key_ranges(_batch(spark, keys, "x"), ["key", "name"], schema)

    assert may_hold(data_file, ranges([3]), schema)
    assert may_hold(data_file, ranges([10, 50]), schema)  # overlaps at 10
    assert not may_hold(data_file, ranges([11, 50]), schema)
    assert not may_hold(data_file, ranges([0]), schema)
    # the string column alone rules it out: n0001..n0010 against "zzz"
    outside = spark.createDataFrame([(5, "zzz", "x")], SCHEMA)
    assert not may_hold(data_file, key_ranges(outside, ["key", "name"], schema), schema)
    # a null key matches no stored row: nothing to read
    nulls = spark.createDataFrame([(None, "n0005", "x")], SCHEMA)
    assert key_ranges(nulls, ["key", "name"], schema) is None


@pytest.mark.parametrize("bounds", ["lower", "upper", "both"])
def test_a_file_without_bounds_for_a_key_column_is_read(spark, tmp_path, bounds):
    sink = _sink(tmp_path, ["key"])
    write_sink(_batch(spark, range(1, 11), "a"), sink, batch_id=1, job="j")
    schema = _table(sink).schema()
    (data_file,) = _live(sink)
    field_id = schema.find_field("key").field_id
    if bounds in ("lower", "both"):
        data_file.lower_bounds.pop(field_id)
    if bounds in ("upper", "both"):
        data_file.upper_bounds.pop(field_id)
    far = key_ranges(_batch(spark, [500], "x"), ["key"], schema)
    # 500 lies above the file's keys 1..10: only the upper bound can rule the file out
    assert may_hold(data_file, far, schema) is (bounds in ("upper", "both"))
