"""A batch's counts and watermark come from its write (no extra Spark pass), and are exact."""

import uuid
from datetime import UTC, datetime

import psycopg2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from workers.spark.processors import register
from workers.spark.run import run_batch


@register("test_first_two_rows")
def _first_two_rows(df, ctx):
    return df.orderBy("id").limit(2)


@register("test_ignores_its_input")
def _ignores_its_input(df, ctx):
    return df.sparkSession.range(5).withColumnRenamed("id", "n")


def _file(path, ids):
    pq.write_table(
        pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "at": pa.array(
                    [datetime(2026, 1, 1, i % 24, tzinfo=UTC) for i in ids],
                    pa.timestamp("us", "UTC"),
                ),
            }
        ),
        path,
    )
    return str(path)


def _spec(items, out, **extra):
    return {
        "job": "counts",
        "batch_id": 21,
        "lower": 1,
        "upper": 3,
        "items": items,
        "format": "parquet",
        "processor": "passthrough",
        "params": {},
        "sink": {"kind": "files", "path": str(out)},
        **extra,
    }


def _jobs_of(spark, run):
    """The Spark jobs `run()` starts on this thread."""
    group = f"test-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "counting jobs")
    try:
        result = run()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return result, list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("watermark_column", [None, "at"])
@pytest.mark.parametrize("sink_format", ["parquet", "json"])
def test_a_batch_runs_no_more_spark_jobs_than_a_bare_read_and_write_and_reports_exact_numbers(
    spark, tmp_path, watermark_column, sink_format
):
    items = [_file(tmp_path / "a.parquet", [1, 2, 3]), _file(tmp_path / "b.parquet", [4, 5])]
    spec = _spec(items, tmp_path / "out", watermark_column=watermark_column)
    spec["sink"]["format"] = sink_format
    result, jobs = _jobs_of(spark, lambda: run_batch(spark, spec))

    def bare():
        spark.read.parquet(*items).write.format(sink_format).save(str(tmp_path / "bare"))

    _, bare_jobs = _jobs_of(spark, bare)
    assert len(jobs) == len(bare_jobs)  # schema inference and the write: no counting pass
    assert (result["rows_in"], result["rows_out"]) == (5, 5)
    assert result["bytes"] > 0
    if watermark_column:
        assert result["watermark"] == "2026-01-01T05:00:00+00:00"
    written = spark.read.format(sink_format).load(result["location"])
    assert written.count() == 5


def test_a_processor_that_stops_reading_early_still_gets_the_exact_input_count(spark, tmp_path):
    items = [_file(tmp_path / "a.parquet", list(range(1, 101)))]
    spec = _spec(items, tmp_path / "out", processor="test_first_two_rows", watermark_column="id")
    result = run_batch(spark, spec)
    assert (result["rows_in"], result["rows_out"], result["watermark"]) == (100, 2, 100)


def test_a_processor_that_does_not_read_its_input_still_gets_the_input_count(spark, tmp_path):
    items = [_file(tmp_path / "a.parquet", [1, 2, 3])]
    spec = _spec(items, tmp_path / "out", processor="test_ignores_its_input", watermark_column="id")
    result = run_batch(spark, spec)
    assert (result["rows_in"], result["rows_out"], result["watermark"]) == (3, 5, 3)


def test_an_empty_input_reports_zero_rows_and_no_watermark(spark, tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.int64())}), path)
    spec = _spec([str(path)], tmp_path / "out", watermark_column="id")
    result = run_batch(spark, spec)
    assert (result["rows_in"], result["rows_out"], result["watermark"]) == (0, 0, None)
    assert spark.read.parquet(result["location"]).select(F.count("*")).first()[0] == 0


@pytest.mark.parametrize("mode", ["append", "upsert", "coalesce"])
def test_a_batch_into_postgres_reads_its_input_once_and_reports_exact_numbers(
    spark, tmp_path, monkeypatch, mode
):
    # the PostgreSQL sink copies with an RDD action, which reports no observation by itself: the
    # sink hands back what the plan it ran observed, so nothing counts the input a second time
    from django.conf import settings

    monkeypatch.setenv("TM_TEST_PROFILE_DSN", settings.DATABASE_URL)
    schema = f"tm_profile_{uuid.uuid4().hex[:10]}"
    items = [_file(tmp_path / "a.parquet", [1, 2, 3]), _file(tmp_path / "b.parquet", [4, 5])]
    sink = {
        "kind": "postgres",
        "dsn_env": "TM_TEST_PROFILE_DSN",
        "table": f"{schema}.out",
        "key": ["id"],
        "mode": mode,
    }
    spec = _spec(items, tmp_path / "out", watermark_column="at", sink=sink)
    try:
        result, jobs = _jobs_of(spark, lambda: run_batch(spark, spec))
    finally:
        conn = psycopg2.connect(settings.DATABASE_URL)
        conn.autocommit = True
        with conn, conn.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{schema}"."out"')
            (stored,) = cur.fetchone()
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()

    def bare():
        spark.read.parquet(*items).foreachPartition(lambda rows: None)

    _, bare_jobs = _jobs_of(spark, bare)
    assert len(jobs) == len(bare_jobs)  # the copy, and no counting pass
    assert (result["rows_in"], result["rows_out"], stored) == (5, 5, 5)
    assert result["watermark"] == "2026-01-01T05:00:00+00:00"
    assert "observed" not in result
