"""Readers: Parquet, JSON lines and CSV items, lineage columns, clear errors for bad input."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from workers.spark.errors import ReadError
from workers.spark.sources.files import read_items

LINEAGE = {"batch_id": 7, "job": "orders", "processed_at": "2026-01-02T03:04:05+00:00"}


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def lineage_of(df):
    rows = df.select(
        "_tm_batch_id",
        "_tm_job",
        F.date_format("_tm_processed_at", "yyyy-MM-dd'T'HH:mm:ssxxx").alias("at"),
        "_tm_source_file",
    ).collect()
    return {(r[0], r[1], r[2], r[3].rsplit("/", 1)[-1]) for r in rows}


def test_parquet_items_with_lineage(spark, tmp_path):
    a = write_parquet(tmp_path / "a.parquet", [{"id": 1, "name": "x"}, {"id": 2, "name": "y"}])
    b = write_parquet(tmp_path / "b.parquet", [{"id": 3, "name": "z"}])
    df = read_items(spark, [a, b], "parquet", lineage=LINEAGE)
    assert sorted((r.id, r.name) for r in df.collect()) == [(1, "x"), (2, "y"), (3, "z")]
    assert dict(df.dtypes)["_tm_processed_at"] == "timestamp"
    assert lineage_of(df) == {
        (7, "orders", "2026-01-02T03:04:05+00:00", "a.parquet"),
        (7, "orders", "2026-01-02T03:04:05+00:00", "b.parquet"),
    }
    per_file = {
        (r._tm_source_file.rsplit("/", 1)[-1], r.id)
        for r in df.select("_tm_source_file", "id").collect()
    }
    assert per_file == {("a.parquet", 1), ("a.parquet", 2), ("b.parquet", 3)}


def test_json_lines_items_without_lineage_have_only_their_columns(spark, tmp_path):
    path = write_jsonl(tmp_path / "e.json", [{"id": 1, "tag": "a"}, {"id": 2, "tag": None}])
    df = read_items(spark, [path], "json")
    assert sorted(df.columns) == ["id", "tag"]
    assert sorted((r.id, r.tag) for r in df.collect()) == [(1, "a"), (2, None)]


def test_json_lines_with_a_ddl_schema_and_lineage(spark, tmp_path):
    path = write_jsonl(tmp_path / "e.json", [{"id": 1, "at": "2026-01-01T10:00:00Z"}])
    df = read_items(spark, [path], "json", schema="id BIGINT, at TIMESTAMP", lineage=LINEAGE)
    assert dict(df.dtypes)["at"] == "timestamp"
    assert df.select(F.date_format("at", "HH:mm").alias("t")).first().t == "10:00"
    assert lineage_of(df) == {(7, "orders", "2026-01-02T03:04:05+00:00", "e.json")}


def test_csv_items_with_header_options_schema_and_lineage(spark, tmp_path):
    path = tmp_path / "c.csv"
    path.write_text('id;name\n1;ann\n2;"bob; jr"\n')
    df = read_items(
        spark,
        [str(path)],
        "csv",
        options={"sep": ";"},
        schema="id INT, name STRING",
        lineage=LINEAGE,
    )
    assert sorted((r.id, r.name) for r in df.collect()) == [(1, "ann"), (2, "bob; jr")]
    assert lineage_of(df) == {(7, "orders", "2026-01-02T03:04:05+00:00", "c.csv")}


def test_an_unknown_format_is_a_clear_error(spark, tmp_path):
    with pytest.raises(ReadError, match="unknown input format 'avro'"):
        read_items(spark, [str(tmp_path / "x")], "avro")


def test_a_corrupt_parquet_file_is_a_read_error_naming_the_file(spark, tmp_path):
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not parquet at all" * 4)
    with pytest.raises(ReadError) as caught:
        read_items(spark, [str(bad)], "parquet")
    message = str(caught.value)
    assert message.startswith("cannot read parquet input:")
    assert "broken.parquet" in message and "not a Parquet file" in message


def test_a_missing_item_is_a_read_error(spark, tmp_path):
    with pytest.raises(ReadError, match="cannot read json input"):
        read_items(spark, [str(tmp_path / "gone.json")], "json")


def test_lineage_over_input_that_already_has_lineage_columns_is_a_read_error(spark, tmp_path):
    """Files written by a job with lineage, read by another connector with lineage: the batch
    fails in its read stage naming the columns (Spark's COLUMN_ALREADY_EXISTS surfaced later, as
    the sink's write error)."""
    upstream = write_parquet(tmp_path / "a.parquet", [{"id": 1, "_TM_batch_id": 3, "_tm_job": "a"}])
    with pytest.raises(ReadError, match=r"\['_TM_batch_id', '_tm_job'\].*lineage"):
        read_items(spark, [upstream], "parquet", lineage=LINEAGE)
    assert read_items(spark, [upstream], "parquet").count() == 1


def test_parquet_files_whose_columns_differ_are_read_with_every_column(spark, tmp_path):
    """Schema drift: a later file gains a column. Spark reads one footer's schema unless asked to
    merge, so the new column was dropped silently whenever another file came along in the batch."""
    old = write_parquet(tmp_path / "a.parquet", [{"id": 1}])
    new = write_parquet(tmp_path / "b.parquet", [{"id": 2, "discount": 0.5}])
    for locations in ([old, new], [new, old]):
        df = read_items(spark, locations, "parquet")
        assert sorted(df.columns) == ["discount", "id"]
        assert sorted((r.id, r.discount) for r in df.collect()) == [(1, None), (2, 0.5)]
    # an explicit choice stays the job's
    assert read_items(spark, [old, new], "parquet", options={"mergeSchema": False}).columns == [
        "id"
    ]


def test_file_names_with_glob_characters_are_read_as_named(spark, tmp_path):
    """An item is one file, never a pattern: Spark globbed each location, so `star*.json` also
    read `starX.json` (its rows twice, once in its own batch) and `r[2026-01].json` was an invalid
    character class; a backslash was taken as an escape."""
    named = [
        write_jsonl(tmp_path / name, [{"id": i}])
        for i, name in enumerate(
            ["star*.json", "r[2026-01].json", "e {final}.json", "q?.json", "back\\slash.json"]
        )
    ]
    write_jsonl(tmp_path / "starX.json", [{"id": 100}])
    df = read_items(spark, named, "json", lineage=LINEAGE)
    assert sorted(r.id for r in df.collect()) == [0, 1, 2, 3, 4]


def test_a_file_name_with_a_colon_is_a_read_error_saying_so(spark, tmp_path):
    """Hadoop paths cannot hold a ':' in a file name (an ISO time such as 10:00:00): the batch
    fails naming the file and the reason, not with a URISyntaxException from inside Spark."""
    path = write_jsonl(tmp_path / "orders-2026-01-01T10:00:00.json", [{"id": 1}])
    with pytest.raises(ReadError, match=r"orders-2026-01-01T10:00:00\.json.*':'"):
        read_items(spark, [path], "json")


def test_an_upstream_output_whose_path_has_glob_characters_is_read_as_named(spark, tmp_path):
    """A job_output reads each upstream batch's directory; Spark globbed it, so a sink path
    `out[1]` read its neighbour `out1` instead."""
    from workers.spark.sources import job_output

    for directory, ident in (("out[1]", 1), ("out1", 99)):
        batch_dir = tmp_path / directory / "batch_id=1"
        batch_dir.mkdir(parents=True)
        pq.write_table(pa.table({"id": [ident]}), batch_dir / "part-0.parquet")
    output = {
        "batch_id": 1,
        "commit_seq": 1,
        "location": str(tmp_path / "out[1]" / "batch_id=1"),
        "format": "parquet",
    }
    spec = {"source": {"kind": "job_output", "job": "up", "outputs": [output]}}
    assert [row.id for row in job_output.read(spark, spec).collect()] == [1]
    empty = {"source": {"kind": "job_output", "job": "up", "outputs": [], "schema_from": output}}
    assert job_output.read(spark, empty).columns == ["id"]
