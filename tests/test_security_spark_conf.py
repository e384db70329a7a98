"""Secrets never reach Spark's configuration: a batch that reads a table source and writes a
PostgreSQL sink, both through DSNs with a password in their environment variables, leaves the
password out of the SparkConf, the session's SQL conf, the thread's job descriptions and tags,
and the batch's spec and result (the DSNs travel only inside the tasks, read from the variables on the driver)."""

import uuid

import pytest

from inventory.models import Batch
from inventory.services import execution, lifecycle
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.jobs import job_create
from tests.test_source_table import (  # noqa: F401 - fixture
    SINK_ENV,
    SOURCE_ENV,
    insert,
    run_and_commit,
    source_dsn,
)

pytestmark = pytest.mark.django_db(transaction=True)

CANARY = f"canary-{uuid.uuid4().hex[:12]}"


def test_dsn_passwords_stay_out_of_the_spark_conf_and_the_batch(
    spark,
    source_dsn,  # noqa: F811
    monkeypatch,
):
    import os

    # trust authentication ignores the password, so the batch runs with the canary in both DSNs
    monkeypatch.setenv(SOURCE_ENV, f"{source_dsn} password={CANARY}")
    monkeypatch.setenv(SINK_ENV, f"{os.environ[SINK_ENV]} password={CANARY}")
    insert(source_dsn, range(1, 11))
    connector = connector_create(
        name="canary-orders",
        kind="table",
        config={"dsn_env": SOURCE_ENV, "table": "orders", "column": "id"},
    )
    job = job_create(
        name="canary-copy",
        connector=connector,
        batch_weight=100,
        sink={"kind": "postgres", "dsn_env": SINK_ENV, "table": "canary_orders", "key": ["id"]},
    )
    discover(connector)
    batch = lifecycle.batch_acquire(job=job, worker="t")
    spec = execution.batch_spec(batch=Batch.objects.get(pk=batch.pk))
    run_and_commit(spark, batch)

    batch.refresh_from_db()
    assert batch.result["rows_in"] == 10
    context = spark.sparkContext
    seen = {
        "spec": repr(spec),
        "result": repr(batch.result),
        "SparkConf": repr(context.getConf().getAll()),
        "SQL conf": repr(spark.conf.getAll),
        # job descriptions, groups and tags of this thread's Spark jobs
        "local properties": repr(context._jsc.sc().getLocalProperties()),
    }
    for where, text in seen.items():
        assert CANARY not in text, where
