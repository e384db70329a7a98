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


def test_the_bounds_never_rule_out_a_file_that_holds_a_key(spark, tmp_path):
    """Differential: the files' bounds as pyiceberg decodes them from what Spark wrote, against
    the keys the files hold as pyarrow reads them, for integer and string keys (non-ASCII, beyond
    the 16 characters a bound keeps, sharing long prefixes), over random batches of keys."""
    import random

    import pyarrow.parquet as pq

    rng = random.Random(46)
    alphabet = ["a", "z", "é", "ÿ", "中", "😀", "\u0100", "~", " "]

    def word() -> str:
        prefix = "p" * rng.choice([0, 15, 16, 17])
        return prefix + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))

    for kind, make, schema_sql in (
        ("int", lambda: rng.randint(-(2**40), 2**40), "key BIGINT, v STRING"),
        ("str", word, "key STRING, v STRING"),
    ):
        sink = {**_sink(tmp_path / kind, ["key"]), "mode": "append"}
        sink.pop("key")
        written = []
        for batch in range(1, 7):
            keys = {make() for _ in range(40)}
            written += keys
            df = spark.createDataFrame([(k, "x") for k in keys], schema_sql).coalesce(1)
            write_sink(df, sink, batch_id=batch, job="j")
        table = _table(sink)
        schema = table.schema()
        held = {
            f.file_path: set(
                pq.read_table(f.file_path.removeprefix("file://")).column("key").to_pylist()
            )
            for f in _live(sink)
        }
        files = _live(sink)
        # each file's own smallest and largest key alone (a bound met exactly), then random batches
        edges = [[edge(held[f.file_path])] for f in files for edge in (min, max)]
        for asked in edges + [rng.sample(written, rng.randint(1, 3)) + [make()] for _ in range(60)]:
            ranges = key_ranges(
                spark.createDataFrame([(k, "x") for k in asked], schema_sql), ["key"], schema
            )
            for data_file in files:
                if held[data_file.file_path] & set(asked):
                    assert may_hold(data_file, ranges, schema), (kind, asked, data_file.file_path)
