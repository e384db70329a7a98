"""Secrets never reach Spark's configuration: a batch that reads a table source and writes a
PostgreSQL sink, both through DSNs with a password in their environment variables, leaves the
password out of the SparkConf, the session's SQL conf, the thread's job descriptions and tags,
and the batch's spec and result (the DSNs travel only inside the tasks, read from the variables on the driver)."""

import uuid

import pytest

from inventory.models import Batch
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.jobs import job_create
from tests.support.table_source import SINK_ENV, SOURCE_ENV, insert, run_and_commit
from workers import specs

pytestmark = pytest.mark.django_db(transaction=True)

CANARY = f"canary-{uuid.uuid4().hex[:12]}"


def test_dsn_passwords_stay_out_of_the_spark_conf_and_the_batch(
    spark,
    source_dsn,
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
    spec = specs.batch_spec(batch=Batch.objects.get(pk=batch.pk))
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


def _spark_visible_text(spark, df) -> dict:
    context = spark.sparkContext
    return {
        "SparkConf": repr(context.getConf().getAll()),
        "SQL conf": repr(spark.conf.getAll),
        "local properties": repr(context._jsc.sc().getLocalProperties()),
        "plan": df._jdf.queryExecution().toString(),
    }


def test_object_store_credentials_reach_executors_only_inside_the_data_source(
    spark, s3_server, s3_bucket, monkeypatch
):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.support.s3_fixtures import KEY_ENV, SECRET_ENV, SECRET_VALUE
    from workers.spark.sources import object_store as read_object_store

    buffer = io.BytesIO()
    pq.write_table(pa.table({"order_id": [1, 2, 3]}), buffer)
    s3_server.client().put_object(Bucket=s3_bucket, Key="in/a.parquet", Body=buffer.getvalue())
    spec = {
        "format": "parquet",
        "source": {
            "kind": "object_store",
            "objects": [{"location": f"s3://{s3_bucket}/in/a.parquet", "size": None}],
            "endpoint_url": s3_server.endpoint_url,
            "region": "us-east-1",
            "key_env": KEY_ENV,
            "secret_env": SECRET_ENV,
        },
    }
    df = read_object_store.read(spark, spec)
    # the executors read with the credentials that came inside the data source
    assert sorted(row.order_id for row in df.collect()) == [1, 2, 3]
    for where, text in _spark_visible_text(spark, df).items():
        assert SECRET_VALUE not in text, where
    assert SECRET_VALUE not in repr(spec)


def test_kafka_sasl_passwords_stay_out_of_the_spark_conf_and_the_plan(spark, monkeypatch):
    from workers.spark.sources import kafka as read_kafka

    monkeypatch.setenv("TIDEMARK_TEST_KAFKA_USER", "reader")
    monkeypatch.setenv("TIDEMARK_TEST_KAFKA_PASS", CANARY)
    # the broker's offsets are looked at on the driver with the same credentials; no broker here
    monkeypatch.setattr(read_kafka, "check_offsets", lambda *args, **kwargs: None)
    source = {
        "kind": "kafka",
        "bootstrap_servers": "127.0.0.1:9",
        "topic": "orders",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username_env": "TIDEMARK_TEST_KAFKA_USER",
        "sasl_password_env": "TIDEMARK_TEST_KAFKA_PASS",
        "slices": [{"partition": 0, "start": 0, "end": 10}],
    }
    df = read_kafka.read(spark, {"source": source})
    assert df.columns[:2] == ["key", "value"]
    for where, text in _spark_visible_text(spark, df).items():
        assert CANARY not in text, where
