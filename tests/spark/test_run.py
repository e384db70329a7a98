"""run_batch end to end on small files, its errors, and one batch through a real spark-submit."""

import json
import subprocess
import uuid
from datetime import UTC, datetime

import psycopg2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from tests.support.batch_specs import spec_for
from workers.spark.errors import BatchError
from workers.spark.run import run_batch
from workers.spark.submit import submit_command


def ts(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 1, day, hour, minute, tzinfo=UTC)


def orders_file(path, rows):
    table = pa.Table.from_pylist(
        [{"order_id": o, "customer_id": c, "amount": a, "event_time": t} for o, c, a, t in rows],
        schema=pa.schema(
            [
                ("order_id", pa.int64()),
                ("customer_id", pa.string()),
                ("amount", pa.float64()),
                ("event_time", pa.timestamp("us", tz="UTC")),
            ]
        ),
    )
    pq.write_table(table, path)
    return str(path)


def test_run_batch_reads_processes_writes_and_reports(spark, tmp_path):
    a = orders_file(
        tmp_path / "a.parquet", [(1, "c1", 10.0, ts(1, 10, 5)), (2, "c2", 5.0, ts(1, 10, 30))]
    )
    b = orders_file(tmp_path / "b.parquet", [(3, "c1", 2.5, ts(1, 11, 59))])
    out = tmp_path / "hourly"
    spec = spec_for(
        [a, b],
        {"kind": "files", "path": str(out), "format": "parquet"},
        params={"watermark_column": "event_time"},
    )
    result = run_batch(spark, spec)
    assert result["rows_in"] == 3
    assert result["rows_out"] == 2
    assert result["bytes"] > 0
    assert result["location"] == f"{out}/batch_id=11"
    assert result["seconds"] > 0
    # the latest event time in the data, not the clock
    assert result["watermark"] == "2026-01-01T11:59:00+00:00"
    written = spark.read.parquet(str(out)).select(
        F.date_format("hour", "HH:mm").alias("h"), "orders", "revenue", "customers", "batch_id"
    )
    assert sorted(tuple(r) for r in written.collect()) == [
        ("10:00", 2, 15.0, 2, 11),
        ("11:00", 1, 2.5, 1, 11),
    ]

    # a replay of the batch leaves exactly the same output
    run_batch(spark, spec)
    assert spark.read.parquet(str(out)).count() == 2


def test_run_batch_with_lineage_and_a_coalesce_table(spark, tmp_path, monkeypatch):
    from django.conf import settings

    monkeypatch.setenv("TM_TEST_RUN_DSN", settings.DATABASE_URL)
    schema = f"tm_run_{uuid.uuid4().hex[:10]}"
    events = tmp_path / "customers.json"
    events.write_text(
        "\n".join(
            json.dumps(e)
            for e in [
                {
                    "customer_id": "c1",
                    "email": "a@x",
                    "name": None,
                    "city": None,
                    "event_time": "2026-01-01T10:00:00Z",
                },
                {
                    "customer_id": "c1",
                    "email": None,
                    "name": "Ann",
                    "city": None,
                    "event_time": "2026-01-01T11:00:00Z",
                },
            ]
        )
    )
    sink = {
        "kind": "postgres",
        "dsn_env": "TM_TEST_RUN_DSN",
        "table": f"{schema}.customers",
        "key": ["customer_id"],
        "mode": "coalesce",
    }
    spec = spec_for(
        [str(events)],
        sink,
        format="json",
        schema="customer_id STRING, email STRING, name STRING, city STRING, event_time TIMESTAMP",
        processor="customers_latest",
        watermark_column="event_time",
    )
    try:
        result = run_batch(spark, spec)
        assert (result["rows_in"], result["rows_out"], result["location"]) == (
            2,
            1,
            f"{schema}.customers",
        )
        assert result["watermark"] == "2026-01-01T11:00:00+00:00"
        events.write_text(
            json.dumps(
                {
                    "customer_id": "c1",
                    "email": None,
                    "name": None,
                    "city": "Oslo",
                    "event_time": "2026-01-02T09:00:00Z",
                }
            )
        )
        run_batch(spark, {**spec, "batch_id": 12})
        with psycopg2.connect(settings.DATABASE_URL) as conn, conn.cursor() as cur:
            cur.execute(f'SELECT customer_id, email, name, city FROM "{schema}".customers')
            assert cur.fetchall() == [("c1", "a@x", "Ann", "Oslo")]
    finally:
        with psycopg2.connect(settings.DATABASE_URL) as conn, conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_corrupt_parquet_file_fails_the_batch_with_a_clear_read_error(spark, tmp_path):
    good = orders_file(tmp_path / "good.parquet", [(1, "c1", 1.0, ts(1, 1))])
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"\x00garbage\x00" * 64)
    out = tmp_path / "out"
    spec = spec_for(
        [good, str(bad)],
        {"kind": "files", "path": str(out)},
        schema="order_id BIGINT, customer_id STRING, amount DOUBLE, event_time TIMESTAMP",
    )
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    error = caught.value.as_dict()
    assert error["type"] == "ReadError"
    assert error["stage"] == "read"
    assert error["message"].startswith("cannot read parquet input:")
    assert "bad.parquet" in error["message"]
    assert error["detail"] and "\tat " not in error["detail"]
    assert len(error["detail"].splitlines()) <= 15
    assert not out.exists()  # nothing written


def test_a_malformed_json_line_fails_the_batch(spark, tmp_path):
    path = tmp_path / "e.json"
    path.write_text('{"order_id": 1}\n{"order_id": \n')
    spec = spec_for(
        [str(path)],
        {"kind": "files", "path": str(tmp_path / "out")},
        format="json",
        processor="passthrough",
    )
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    assert caught.value.type == "ReadError"
    assert "malformed" in caught.value.message.lower()


def test_csv_files_whose_headers_disagree_fail_the_batch_naming_the_file(spark, tmp_path):
    """Without a declared schema, the header names the columns: a file with its columns in
    another order was read by position under the first file's header (id 'b', name '2')."""
    first = tmp_path / "a.csv"
    first.write_text("id,name\n1,a\n")
    swapped = tmp_path / "b.csv"
    swapped.write_text("name,id\nb,2\n")
    out = tmp_path / "out"
    spec = spec_for(
        [str(first), str(swapped)],
        {"kind": "files", "path": str(out)},
        format="csv",
        processor="passthrough",
    )
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    error = caught.value.as_dict()
    assert (error["type"], error["stage"]) == ("ReadError", "read"), error
    assert "b.csv" in error["message"] and "header" in error["message"], error
    assert not out.exists()

    same = tmp_path / "c.csv"
    same.write_text("id,name\n3,c\n")
    assert run_batch(spark, {**spec, "items": [str(first), str(same)]})["rows_out"] == 2


def test_a_batch_of_empty_files_is_a_read_error_naming_them(spark, tmp_path):
    """Zero-byte JSON lines or CSV files: Spark infers no columns at all; the batch fails in its
    read stage saying so (not as the sink's "empty schema" write error), and with the
    connector's `schema` the same files read as zero rows."""
    empty = tmp_path / "empty.json"
    empty.write_text("")
    out = tmp_path / "out"
    spec = spec_for(
        [str(empty)], {"kind": "files", "path": str(out)}, format="json", processor="passthrough"
    )
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    error = caught.value.as_dict()
    assert (error["type"], error["stage"]) == ("ReadError", "read"), error
    assert "empty.json" in error["message"] and "schema" in error["message"], error
    assert not out.exists()

    result = run_batch(spark, {**spec, "schema": "order_id BIGINT"})
    assert result["rows_in"] == 0 and result["rows_out"] == 0


def test_config_errors_fail_before_any_spark_work(spark, tmp_path):
    sink = {"kind": "files", "path": str(tmp_path)}
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec_for(["x"], sink, processor="nope"))
    assert (caught.value.type, caught.value.stage) == ("UnknownProcessor", "config")
    assert "'nope'" in caught.value.message

    with pytest.raises(BatchError, match="spec field 'batch_id'") as caught:
        run_batch(spark, spec_for(["x"], sink, batch_id="11"))
    assert caught.value.type == "InvalidSpec"

    with pytest.raises(BatchError, match="sink 'mode'"):
        run_batch(
            spark,
            spec_for(["x"], {"kind": "postgres", "table": "t", "dsn_env": "X", "mode": "zap"}),
        )


def test_a_processor_error_names_the_processor_and_spark_cause(spark, tmp_path):
    path = orders_file(tmp_path / "a.parquet", [(1, "c1", 1.0, ts(1, 1))])
    spec = spec_for(
        [path],
        {"kind": "files", "path": str(tmp_path / "out")},
        processor="sql",
        params={"query": "SELECT no_such_column FROM batch"},
    )
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    error = caught.value
    assert (error.type, error.stage) == ("AnalysisException", "process")
    assert error.message.startswith("processor 'sql' failed:")
    assert "no_such_column" in error.message


def test_a_batch_runs_as_its_own_spark_submit_process(tmp_path):
    items = tmp_path / "in.json"
    items.write_text('{"id": 1, "v": "a"}\n{"id": 2, "v": "b"}\n')
    out = tmp_path / "out"
    spec = spec_for(
        [str(items)],
        {"kind": "files", "path": str(out), "format": "parquet"},
        format="json",
        processor="passthrough",
        lineage=True,
        processed_at="2026-01-05T00:00:00+00:00",
        watermark_column="id",
    )
    spec_path = tmp_path / "spec.json"
    result_path = tmp_path / "result.json"
    spec_path.write_text(json.dumps(spec))
    command = submit_command(
        str(spec_path), str(result_path), "local[1]", {"spark.driver.memory": "512m"}
    )
    assert command[0].endswith("pyspark/bin/spark-submit")
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    outcome = json.loads(result_path.read_text())
    assert outcome["ok"] is True
    result = outcome["result"]
    assert (result["rows_in"], result["rows_out"], result["watermark"]) == (2, 2, 2)
    assert result["location"] == f"{out}/batch_id=11"
    rows = pq.read_table(str(out / "batch_id=11")).to_pylist()
    assert sorted((r["id"], r["v"], r["_tm_batch_id"], r["_tm_job"]) for r in rows) == [
        (1, "a", 11, "orders-hourly"),
        (2, "b", 11, "orders-hourly"),
    ]


def test_error_summary_and_detail_keep_the_python_error_and_drop_stack_frames():
    from workers.spark.errors import spark_error_detail, spark_error_summary

    text = (
        "An error occurred while calling z:PythonRDD.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted: org.apache.spark.api.python.PythonException: "
        "Traceback (most recent call last):\n"
        '  File "/x/worker.py", line 2044, in main\n'
        "    process()\n"
        "psycopg2.errors.InvalidTextRepresentation: invalid input syntax for type integer\n"
        "CONTEXT:  COPY stage, line 1\n"
        "\n\tat org.apache.spark.api.python.BasePythonRunner.read(PythonRunner.scala:1)\n"
        "\tat scala.Option.foreach(Option.scala:437)\n"
    )
    error = RuntimeError(text)
    assert spark_error_summary(error) == (
        "psycopg2.errors.InvalidTextRepresentation: invalid input syntax for type integer"
    )
    detail = spark_error_detail(error)
    assert "psycopg2.errors.InvalidTextRepresentation" in detail
    assert "File " not in detail and "\tat " not in detail and "scala" not in detail


def test_read_result_returns_the_result_or_raises_the_stored_error(tmp_path):
    from workers.spark.submit import read_result

    path = tmp_path / "result.json"
    path.write_text(json.dumps({"ok": True, "result": {"rows_in": 3}}))
    assert read_result(path, 0) == {"rows_in": 3}

    error = {"type": "ReadError", "message": "cannot read", "detail": "d", "stage": "read"}
    path.write_text(json.dumps({"ok": False, "error": error}))
    with pytest.raises(BatchError) as caught:
        read_result(path, 1)
    assert caught.value.as_dict() == error

    log = tmp_path / "spark-submit.log"
    log.write_text("java.lang.OutOfMemoryError: Java heap space\n\tat somewhere\n")
    with pytest.raises(BatchError) as caught:
        read_result(tmp_path / "missing.json", 137, log)
    assert caught.value.type == "SparkSubmitFailed"
    assert "code 137" in caught.value.message
    assert caught.value.detail == "java.lang.OutOfMemoryError: Java heap space"
