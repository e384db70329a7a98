"""Processors: the registry and the shipped processors' output, row by row."""

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from workers.spark.processors import (
    ProcessorContext,
    ProcessorError,
    UnknownProcessor,
    get_processor,
    processor_names,
    register,
    validate_params,
)

ROOT = Path(__file__).resolve().parents[2]


def ctx(**params) -> ProcessorContext:
    return ProcessorContext(
        job="j", batch_id=3, lower=10, upper=20, params=params, kind="incremental"
    )


def ts(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 1, 1, hour, minute, tzinfo=UTC)


def as_text(df, column):
    return df.withColumn(column, F.date_format(column, "yyyy-MM-dd HH:mm"))


def test_spark_side_never_imports_django():
    sources = list((ROOT / "workers" / "spark").rglob("*.py"))
    assert sources
    for source in sources:
        text = source.read_text()
        assert "import django" not in text and "from django" not in text, source
    code = (
        "import sys, workers.spark.run, workers.spark.submit, workers.spark.session;"
        "assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')]"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_an_unknown_processor_names_itself_and_the_known_ones():
    with pytest.raises(UnknownProcessor) as caught:
        get_processor("no_such_thing")
    assert caught.value.name == "no_such_thing"
    assert {"passthrough", "sql", "orders_hourly", "customers_latest"} <= set(caught.value.known)
    assert "'no_such_thing'" in str(caught.value) and "passthrough" in str(caught.value)


def test_registering_a_second_function_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):

        @register("passthrough")
        def another(df, ctx):
            return df

    assert "passthrough" in processor_names()


def test_passthrough_returns_the_rows_unchanged(spark):
    df = spark.createDataFrame([(1, "a"), (2, None)], "id INT, name STRING")
    out = get_processor("passthrough")(df, ctx())
    assert sorted(out.collect()) == sorted(df.collect())


def test_sql_runs_the_query_over_the_batch_view_with_range_parameters(spark):
    df = spark.createDataFrame([(9, 1.5), (10, 2.0), (15, 4.0)], "id INT, amount DOUBLE")
    query = "SELECT id, amount * 2 AS doubled, :batch_id AS b FROM batch WHERE id >= :lower"
    out = get_processor("sql")(df, ctx(query=query))
    assert [tuple(r) for r in out.orderBy("id").collect()] == [(10, 4.0, 3), (15, 8.0, 3)]
    # the view is gone once the query is planned; the result does not depend on it
    assert not spark.catalog.tableExists("batch")
    assert out.count() == 2


@pytest.mark.parametrize("params", [{}, {"query": 42}, {"query": "  "}])
def test_sql_without_a_query_string_names_the_param(spark, params):
    df = spark.createDataFrame([(1,)], "id INT")
    with pytest.raises(ProcessorError, match="param 'query'"):
        get_processor("sql")(df, ctx(**params))
    with pytest.raises(ProcessorError, match="param 'query'"):
        validate_params("sql", params)


def test_validate_params_refuses_an_unknown_processor():
    with pytest.raises(UnknownProcessor):
        validate_params("nope", {})


def test_orders_hourly_counts_orders_revenue_and_customers_per_hour(spark):
    rows = [
        (1, "c1", 10.0, ts(10, 5)),
        (2, "c2", 5.5, ts(10, 59)),
        (2, "c2", 5.5, ts(10, 59)),  # the same event twice counts once
        (3, "c1", 2.25, ts(11, 0)),
        (4, "c3", 1.0, ts(11, 30)),
        (5, "c3", 0.75, ts(13, 1)),
    ]
    df = spark.createDataFrame(
        rows, "order_id INT, customer_id STRING, amount DOUBLE, event_time TIMESTAMP"
    )
    out = get_processor("orders_hourly")(df, ctx())
    assert out.columns == ["hour", "orders", "revenue", "customers"]
    assert [tuple(r) for r in as_text(out, "hour").collect()] == [
        ("2026-01-01 10:00", 2, 15.5, 2),
        ("2026-01-01 11:00", 2, 3.25, 2),
        ("2026-01-01 13:00", 1, 0.75, 1),
    ]


def test_orders_hourly_names_missing_input_columns(spark):
    df = spark.createDataFrame([(1, 2.0)], "order_id INT, amount DOUBLE")
    with pytest.raises(ProcessorError, match="customer_id") as caught:
        get_processor("orders_hourly")(df, ctx())
    assert "event_time" in str(caught.value)


def test_customers_latest_keeps_the_latest_non_null_value_of_each_field(spark):
    rows = [
        ("c1", None, "Anna", None, ts(9)),  # older than the name below: loses
        ("c1", "a@x.org", "Ann", None, ts(10)),
        ("c1", None, None, "Oslo", ts(11)),
        ("c1", "b@x.org", None, None, ts(12)),
        ("c2", None, "Bob", None, ts(10)),
        (None, "ghost@x.org", None, None, ts(10)),  # no key: dropped
    ]
    df = spark.createDataFrame(
        rows, "customer_id STRING, email STRING, name STRING, city STRING, event_time TIMESTAMP"
    )
    out = get_processor("customers_latest")(df, ctx())
    assert out.columns == ["customer_id", "email", "name", "city", "updated_at"]
    assert [tuple(r) for r in as_text(out, "updated_at").collect()] == [
        ("c1", "b@x.org", "Ann", "Oslo", "2026-01-01 12:00"),
        ("c2", None, "Bob", None, "2026-01-01 10:00"),
    ]


def test_customers_latest_validates_its_params(spark):
    df = spark.createDataFrame([("c1", "x")], "customer_id STRING, email STRING")
    with pytest.raises(ProcessorError, match="param 'fields'"):
        get_processor("customers_latest")(df, ctx(fields="email"))
    with pytest.raises(ProcessorError, match="param 'fields'"):
        validate_params("customers_latest", {"fields": []})
    with pytest.raises(ProcessorError, match="event_time"):
        get_processor("customers_latest")(df, ctx(fields=["email"]))
