"""The example processor on a small DataFrame, with a local SparkSession and nothing else.

The main suite runs this file too (tests/spark/test_example_processors.py) with its one SparkSession.
"""

import pytest
from tidemark_example_processors.orders import customer_totals

from workers.spark.processors import (
    ProcessorContext,
    ProcessorError,
    get_processor,
    validate_params,
)


def _ctx(**params):
    return ProcessorContext(job="j", batch_id=7, lower=1, upper=2, params=params)


def check_customer_totals(spark):
    rows = [
        (1, 10, 20.0),
        (1, 10, 20.0),  # the same order twice (two files): counted once
        (2, 10, 5.5),
        (3, 11, 1.0),
    ]
    df = spark.createDataFrame(rows, "order_id long, customer_id long, amount double")
    out = customer_totals(df, _ctx()).collect()
    assert [r.asDict() for r in out] == [
        {"customer_id": 10, "orders": 2, "total": 25.5},
        {"customer_id": 11, "orders": 1, "total": 1.0},
    ]
    big = customer_totals(df, _ctx(min_amount=5)).collect()
    assert [(r.customer_id, r.orders) for r in big] == [(10, 2)]


def check_it_is_registered_and_checks_its_params():
    assert get_processor("example_customer_totals") is customer_totals
    with pytest.raises(ProcessorError, match="min_amount"):
        validate_params("example_customer_totals", {"min_amount": -1})


@pytest.fixture(scope="module")
def local_spark():
    from pyspark.sql import SparkSession

    session = SparkSession.builder.master("local[1]").appName("example-processors").getOrCreate()
    yield session


def test_customer_totals(local_spark):
    check_customer_totals(local_spark)


def test_it_is_registered_and_checks_its_params():
    check_it_is_registered_and_checks_its_params()
