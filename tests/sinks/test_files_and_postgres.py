"""Sinks: a rerun replaces the batch's own output; PostgreSQL merges append/upsert/coalesce."""

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import psycopg2
import pytest

from workers.spark.errors import SinkError
from workers.spark.sinks import check_sink, write_sink

# ---- files ---------------------------------------------------------------------------------------


def files_sink(path, **extra):
    return {"kind": "files", "path": str(path), "format": "parquet", **extra}


def rows_of(spark, path):
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).collect())


def test_file_sink_rerun_replaces_the_batch_output_instead_of_adding_to_it(spark, tmp_path):
    out = tmp_path / "out"
    first = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id INT, v STRING")
    result = write_sink(first, files_sink(out), batch_id=5)
    assert result["rows_out"] == 3
    assert result["bytes"] > 0
    assert result["location"] == f"{out}/batch_id=5"
    assert rows_of(spark, out) == [(1, "a", 5), (2, "b", 5), (3, "c", 5)]

    # a retry of the same batch: same rows, written once
    assert write_sink(first, files_sink(out), batch_id=5)["rows_out"] == 3
    assert rows_of(spark, out) == [(1, "a", 5), (2, "b", 5), (3, "c", 5)]

    # a replay with different output replaces it; another batch sits beside it
    write_sink(spark.createDataFrame([(1, "A")], "id INT, v STRING"), files_sink(out), batch_id=5)
    write_sink(spark.createDataFrame([(9, "z")], "id INT, v STRING"), files_sink(out), batch_id=6)
    assert rows_of(spark, out) == [(1, "A", 5), (9, "z", 6)]
    # no staged or replaced directories are left behind
    assert sorted(p.name for p in out.iterdir()) == ["_staging", "batch_id=5", "batch_id=6"]
    assert list((out / "_staging").iterdir()) == []


def test_a_publish_whose_fence_fails_to_commit_leaves_the_committed_outputs(spark, tmp_path):
    """The fence's end (its commit) can fail after the swap: the outputs it would have replaced
    are still the committed ones, so they stay, and this attempt's output leaves."""
    from contextlib import contextmanager

    out = tmp_path / "out"
    write_sink(spark.createDataFrame([(1, "a")], "id INT, v STRING"), files_sink(out), batch_id=1)
    write_sink(spark.createDataFrame([(2, "b")], "id INT, v STRING"), files_sink(out), batch_id=2)

    @contextmanager
    def failing_commit():
        yield [1, 2]  # this batch replaces 1 and 2 ...
        raise SinkError("publish fence: the commit failed")  # ... but the fence never commits

    rewrite = spark.createDataFrame([(1, "A"), (2, "B")], "id INT, v STRING")
    with pytest.raises(SinkError, match="commit failed"):
        write_sink(rewrite, files_sink(out), batch_id=3, publish=failing_commit)
    assert rows_of(spark, out) == [(1, "a", 1), (2, "b", 2)]
    assert sorted(p.name for p in out.iterdir()) == ["_staging", "batch_id=1", "batch_id=2"]
    assert list((out / "_staging").iterdir()) == []


def test_readers_never_see_staging_and_a_dead_attempt_is_cleaned_up(spark, tmp_path):
    out = tmp_path / "out"
    staged = out / "_staging" / "batch_id=8-deadbeef0000"  # died while writing
    replaced = out / "_staging" / "replaced-batch_id=8-deadbeef0000"  # died while swapping
    other = out / "_staging" / "batch_id=18-deadbeef0000"  # another batch's: not ours to clean
    for leftover in (staged, replaced, other):
        spark.createDataFrame([(99, "half")], "id INT, v STRING").write.parquet(str(leftover))
    write_sink(spark.createDataFrame([(1, "a")], "id INT, v STRING"), files_sink(out), batch_id=7)
    assert rows_of(spark, out) == [(1, "a", 7)]
    assert staged.exists() and replaced.exists()

    write_sink(spark.createDataFrame([(2, "b")], "id INT, v STRING"), files_sink(out), batch_id=8)
    assert not staged.exists() and not replaced.exists() and other.exists()
    assert rows_of(spark, out) == [(1, "a", 7), (2, "b", 8)]


def test_file_sink_refuses_a_column_whose_type_changed_since_the_earlier_batches(spark, tmp_path):
    out = tmp_path / "out"
    write_sink(
        spark.createDataFrame([(1, "a", 2.5)], "id INT, v STRING, x DOUBLE"),
        files_sink(out),
        batch_id=1,
    )
    changed = spark.createDataFrame([("2", "b", 1.0)], "id STRING, v STRING, x DOUBLE")
    with pytest.raises(SinkError, match=r"id \(int before, string now\)"):
        write_sink(changed, files_sink(out), batch_id=2)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("_")) == ["batch_id=1"]
    # a column added, one left out, nullability aside: a reader merges them, so they are kept
    grown = spark.createDataFrame([(3, "c", "new")], "id INT NOT NULL, v STRING, extra STRING")
    write_sink(grown, files_sink(out), batch_id=2)
    merged = spark.read.option("mergeSchema", "true").parquet(str(out))
    assert sorted(r.id for r in merged.collect()) == [1, 3]
    # the replay of the only batch with other types is compared with no other batch: accepted
    alone = tmp_path / "alone"
    write_sink(spark.createDataFrame([(1,)], "id INT"), files_sink(alone), batch_id=1)
    write_sink(spark.createDataFrame([("1",)], "id STRING"), files_sink(alone), batch_id=1)
    assert rows_of(spark, alone) == [("1", 1)]


def test_file_sink_partitions_below_the_batch_directory(spark, tmp_path):
    out = tmp_path / "out"
    df = spark.createDataFrame([(1, "eu"), (2, "us"), (3, "eu")], "id INT, region STRING")
    result = write_sink(df, files_sink(out, partition_by=["region"]), batch_id=2)
    assert result["rows_out"] == 3
    assert sorted(
        p.name for p in (out / "batch_id=2").iterdir() if not p.name.startswith((".", "_"))
    ) == [
        "region=eu",
        "region=us",
    ]
    got = spark.read.parquet(str(out)).select("id", "region", "batch_id").collect()
    assert sorted(tuple(r) for r in got) == [(1, "eu", 2), (2, "us", 2), (3, "eu", 2)]


def test_file_sink_refuses_partition_columns_the_output_lacks(spark, tmp_path):
    df = spark.createDataFrame([(1,)], "id INT")
    with pytest.raises(SinkError, match=r"partition_by.*\['day'\]"):
        write_sink(df, files_sink(tmp_path, partition_by=["day"]), batch_id=1)


@pytest.mark.parametrize("column", ["batch_id", "Batch_ID"])
def test_file_sink_refuses_an_output_column_named_like_its_batch_directories(
    spark, tmp_path, column
):
    """A reader of the sink gets `batch_id` from the `batch_id=<id>` directories, which would
    silently replace the output's own column of that name (Spark's partition value wins, any
    case): the batch fails naming the column, and nothing is written."""
    out = tmp_path / "out"
    df = spark.createDataFrame([(1, 777)], f"id INT, {column} INT")
    with pytest.raises(SinkError, match=rf"column '{column}'"):
        write_sink(df, files_sink(out), batch_id=5)
    assert not out.exists()


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        ({"kind": "s3"}, "unknown sink kind 's3'"),
        ({"kind": "files"}, "sink 'path'"),
        ({"kind": "files", "path": "/x", "format": "xml"}, "sink 'format'"),
        ({"kind": "files", "path": "/x", "partition_by": ["batch_id"]}, "batch_id"),
        ({"kind": "postgres", "table": "a.b.c", "dsn_env": "X"}, "sink 'table'"),
        ({"kind": "postgres", "table": "t;drop", "dsn_env": "X"}, "not a valid identifier"),
        # the sink's own bookkeeping (ledger, key versions): writing there would poison the
        # exactly-once records of every other sink table in that database
        ({"kind": "postgres", "table": "tidemark_sink.ledger", "dsn_env": "X"}, "tidemark_sink"),
        (
            {"kind": "postgres", "table": "tidemark_sink.orders", "dsn_env": "X", "mode": "append"},
            "tidemark_sink",
        ),
        ({"kind": "postgres", "table": "t", "mode": "merge", "dsn_env": "X"}, "sink 'mode'"),
        ({"kind": "postgres", "table": "t", "mode": "upsert", "dsn_env": "X"}, "sink 'key'"),
        ({"kind": "postgres", "table": "t", "mode": "append"}, "dsn_env"),
    ],
)
def test_check_sink_names_the_bad_setting(sink, message):
    with pytest.raises(SinkError, match=message):
        check_sink(sink)


# ---- postgres ------------------------------------------------------------------------------------


@pytest.fixture
def pg(monkeypatch):
    """A schema of its own in the test server; the sink reads the DSN from TM_TEST_SINK_DSN."""
    from django.conf import settings

    dsn = settings.DATABASE_URL
    schema = f"tm_sink_{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("TM_TEST_SINK_DSN", dsn)
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        yield Pg(conn, schema)
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()


class Pg:
    def __init__(self, conn, schema):
        self.conn = conn
        self.schema = schema

    def sink(self, table, **extra):
        return {
            "kind": "postgres",
            "dsn_env": "TM_TEST_SINK_DSN",
            "table": f"{self.schema}.{table}",
            **extra,
        }

    def rows(self, table, order="1"):
        with self.conn.cursor() as cur:
            cur.execute(f'SELECT * FROM "{self.schema}"."{table}" ORDER BY {order}')
            return cur.fetchall()

    def tables(self):
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", [self.schema]
            )
            return [r[0] for r in cur.fetchall()]


CUSTOMERS = "id BIGINT, email STRING, name STRING, city STRING"


def test_upsert_creates_the_table_updates_by_key_and_a_rerun_changes_nothing(spark, pg):
    sink = pg.sink("customers", key=["id"], mode="upsert")
    first = spark.createDataFrame([(1, "a@x", "Ann", "Oslo"), (2, "b@x", "Bob", None)], CUSTOMERS)
    result = write_sink(first, sink, batch_id=1)
    assert result == {
        "rows_out": 2,
        "bytes": None,
        "location": f"{pg.schema}.customers",
        "rows_changed": 2,
    }
    assert pg.rows("customers") == [(1, "a@x", "Ann", "Oslo"), (2, "b@x", "Bob", None)]

    assert write_sink(first, sink, batch_id=1)["rows_changed"] == 0
    assert pg.rows("customers") == [(1, "a@x", "Ann", "Oslo"), (2, "b@x", "Bob", None)]

    # upsert overwrites every non-key column, nulls included
    second = spark.createDataFrame(
        [(2, None, "Bobby", "Rome"), (3, "c@x", "Cy", "Nice")], CUSTOMERS
    )
    assert write_sink(second, sink, batch_id=2)["rows_changed"] == 2
    assert pg.rows("customers") == [
        (1, "a@x", "Ann", "Oslo"),
        (2, None, "Bobby", "Rome"),
        (3, "c@x", "Cy", "Nice"),
    ]
    assert pg.tables() == ["customers"]  # staging tables are dropped
    with pg.conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
            [f"{pg.schema}.customers"],
        )
        assert [r[0] for r in cur.fetchall()] == ["id"]


def test_coalesce_keeps_stored_values_where_the_new_row_has_nulls(spark, pg):
    sink = pg.sink("customers", key=["id"], mode="coalesce")
    stored = spark.createDataFrame([(1, "a@x", "Ann", "Oslo"), (2, "b@x", None, None)], CUSTOMERS)
    write_sink(stored, sink, batch_id=1)

    partial = spark.createDataFrame([(1, None, "Anna", None), (2, None, None, "Rome")], CUSTOMERS)
    assert write_sink(partial, sink, batch_id=2)["rows_changed"] == 2
    expected = [(1, "a@x", "Anna", "Oslo"), (2, "b@x", None, "Rome")]
    assert pg.rows("customers") == expected

    # replaying either batch leaves the table as it is
    assert write_sink(partial, sink, batch_id=2)["rows_changed"] == 0
    assert pg.rows("customers") == expected


def test_coalesce_out_of_source_order_keeps_the_newest_non_null_value_of_each_column(spark, pg):
    # found by the soak: with two batches of a job running at once, a partial update (nulls)
    # merged before the older batch that set those columns; the older batch was then refused
    # whole (its key's version was older), so its values were lost for good
    sink = pg.sink("customers", key=["id"], mode="coalesce")
    v1 = spark.createDataFrame([(1, "a@x", "Ann", "Oslo")], CUSTOMERS)
    v2 = spark.createDataFrame([(1, "b@x", "Bea", None)], CUSTOMERS)
    v3 = spark.createDataFrame([(1, None, "Cy", None), (2, None, "Dan", None)], CUSTOMERS)

    write_sink(v3, sink, batch_id=3, version=30)
    assert pg.rows("customers") == [(1, None, "Cy", None), (2, None, "Dan", None)]
    # older batches merging late fill what the newer one left null, and nothing else
    write_sink(v1, sink, batch_id=1, version=10)
    assert pg.rows("customers") == [(1, "a@x", "Cy", "Oslo"), (2, None, "Dan", None)]
    write_sink(v2, sink, batch_id=2, version=20)
    expected = [(1, "b@x", "Cy", "Oslo"), (2, None, "Dan", None)]
    assert pg.rows("customers") == expected  # email from v2 (newer than v1), name from v3

    # the same values in source order; and a rerun of any batch changes nothing
    for batch_id, df, version in ((1, v1, 10), (3, v3, 30), (2, v2, 20)):
        assert (
            write_sink(df, sink, batch_id=batch_id, attempt=1, version=version)["rows_changed"] == 0
        )
    assert pg.rows("customers") == expected

    in_order = pg.sink("customers_in_order", key=["id"], mode="coalesce")
    for batch_id, df, version in ((1, v1, 10), (2, v2, 20), (3, v3, 30)):
        write_sink(df, in_order, batch_id=batch_id, version=version)
    assert pg.rows("customers_in_order") == expected


def test_append_inserts_and_a_rerun_of_a_lineage_batch_replaces_its_own_rows(spark, pg):
    schema = "id INT, v STRING, _tm_batch_id BIGINT"
    sink = pg.sink("events", mode="append")
    write_sink(spark.createDataFrame([(1, "a", 1), (1, "a", 1)], schema), sink, batch_id=1)
    write_sink(spark.createDataFrame([(2, "b", 2)], schema), sink, batch_id=2)
    write_sink(spark.createDataFrame([(1, "a", 1), (1, "a", 1)], schema), sink, batch_id=1)
    assert pg.rows("events", order="3, 1") == [(1, "a", 1), (1, "a", 1), (2, "b", 2)]


def test_append_without_lineage_is_idempotent_per_batch(spark, pg):
    # issue 8, item 3: a rerun of the same batch (a retry after the merge committed) used to
    # append its rows again; the sink now records the writing batch in _tm_batch_id
    sink = pg.sink("log", mode="append")
    df = spark.createDataFrame([(1,)], "id INT")
    write_sink(df, sink, batch_id=1, attempt=1)
    write_sink(df, sink, batch_id=1, attempt=2)
    write_sink(df, sink, batch_id=2, attempt=1)
    assert pg.rows("log", order="2, 1") == [(1, 1), (1, 2)]


def test_append_keys_its_rows_by_this_batch_even_when_the_output_carries_a_tm_batch_id(spark, pg):
    """An output with a `_tm_batch_id` of another batch (the lineage column of an upstream job,
    passed through): the rows are still recorded under the batch that writes them, so a rerun
    replaces them instead of appending them again, and a replay removes exactly its own."""
    sink = pg.sink("chained", mode="append")
    upstream = spark.createDataFrame([(1, 5), (2, 5)], "id INT, _tm_batch_id BIGINT")
    write_sink(upstream, sink, batch_id=3, attempt=1)
    write_sink(upstream, sink, batch_id=3, attempt=2)
    write_sink(spark.createDataFrame([(9, 3)], "id INT, _tm_batch_id BIGINT"), sink, batch_id=5)
    assert pg.rows("chained") == [(1, 3), (2, 3), (9, 5)]


def test_values_survive_the_copy_exactly(spark, pg):
    schema = (
        "id INT, s STRING, empty STRING, none STRING, amount DECIMAL(10,2), ok BOOLEAN, "
        "day DATE, at TIMESTAMP, ratio DOUBLE, tags ARRAY<STRING>"
    )
    tricky = 'quote " comma , semicolon ; newline \n tab \t back\\slash'
    at = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    row = (1, tricky, "", None, Decimal("12.34"), True, date(2026, 3, 4), at, 0.1, ["a", "b"])
    write_sink(spark.createDataFrame([row], schema), pg.sink("typed", key=["id"]), batch_id=1)
    (got,) = pg.rows("typed")
    assert got[:8] == (1, tricky, "", None, Decimal("12.34"), True, date(2026, 3, 4), at)
    assert got[8] == 0.1 and got[9] == ["a", "b"]


def test_duplicate_keys_in_one_batch_are_refused_unless_order_by_picks_the_latest(spark, pg):
    schema = "id INT, v STRING, seq INT"
    df = spark.createDataFrame([(1, "old", 1), (1, "new", 2), (2, "x", 1)], schema)
    with pytest.raises(SinkError, match=r"several rows for key \{'id': 1\}"):
        write_sink(df, pg.sink("t", key=["id"], mode="upsert"), batch_id=1)
    write_sink(df, pg.sink("t", key=["id"], mode="upsert", order_by="seq"), batch_id=1)
    assert pg.rows("t") == [(1, "new", 2), (2, "x", 1)]
    assert pg.tables() == ["t"]


def test_output_columns_missing_from_an_existing_table_are_named(spark, pg):
    sink = pg.sink("narrow", key=["id"])
    write_sink(spark.createDataFrame([(1,)], "id INT"), sink, batch_id=1)
    with pytest.raises(SinkError, match=r"columns \['extra'\] are not in the sink table"):
        write_sink(spark.createDataFrame([(2, "x")], "id INT, extra STRING"), sink, batch_id=2)
    assert pg.rows("narrow") == [(1,)]


def test_connection_errors_never_show_the_dsn_or_its_password(spark, monkeypatch):
    monkeypatch.setenv("TM_TEST_BAD_DSN", "postgresql://tm:s3cr3t-pw@127.0.0.1:1/nowhere")
    sink = {"kind": "postgres", "dsn_env": "TM_TEST_BAD_DSN", "table": "t", "key": ["id"]}
    with pytest.raises(SinkError) as caught:
        write_sink(spark.createDataFrame([(1,)], "id INT"), sink, batch_id=1)
    assert "cannot connect" in str(caught.value)
    assert "s3cr3t-pw" not in str(caught.value)


def test_an_unset_dsn_variable_is_named(spark, monkeypatch):
    monkeypatch.delenv("TM_TEST_UNSET_DSN", raising=False)
    sink = {"kind": "postgres", "dsn_env": "TM_TEST_UNSET_DSN", "table": "t", "key": ["id"]}
    with pytest.raises(SinkError, match="TM_TEST_UNSET_DSN"):
        write_sink(spark.createDataFrame([(1,)], "id INT"), sink, batch_id=1)
