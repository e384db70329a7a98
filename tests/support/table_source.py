"""`table` connectors in tests (a plugin tests/conftest.py loads): `source_dsn`, a database of its
own on the test server holding `orders` (its DSN in SOURCE_ENV, the sink's in SINK_ENV), rows
inserted into it, a connector over it, and a batch run and committed with the watermark its data
reported."""

import uuid
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from django.db import connection

from inventory.models import Batch
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from inventory.services.outputs import control_plane_dsn
from tests.support.files_job import run_spark
from tests.support.sink_database import sink_database_dsn

SOURCE_ENV = "TM_TEST_TABLE_SOURCE_DSN"
SINK_ENV = "TM_TEST_TABLE_SINK_DSN"


@pytest.fixture
def source_dsn(monkeypatch):
    """A database of its own on the test server, holding `orders`; its DSN in SOURCE_ENV."""
    name = f"tm_source_{uuid.uuid4().hex[:10]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    ours = connection.settings_dict["NAME"]
    dsn = control_plane_dsn().replace(f"dbname='{ours}'", f"dbname='{name}'")
    with psycopg2.connect(dsn) as conn, conn.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, amount integer NOT NULL, "
            "note text, updated_at timestamptz NOT NULL)"
        )
        cursor.execute("CREATE INDEX ON orders (updated_at)")
    monkeypatch.setenv(SOURCE_ENV, dsn)
    monkeypatch.setenv(SINK_ENV, sink_database_dsn())  # never Tidemark's own database
    yield dsn
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def insert(dsn: str, ids, *, at=None, amount: int = 1) -> None:
    """Rows `ids`, updated_at = T0 + id seconds unless `at` is given."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cursor:
        for i in ids:
            cursor.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE "
                "SET amount = excluded.amount, updated_at = excluded.updated_at",
                [i, amount, f"order {i}", at or T0 + timedelta(seconds=i)],
            )


def table_connector(name="orders-db", **config):
    return connector_create(
        name=name,
        kind="table",
        config={"dsn_env": SOURCE_ENV, "table": "orders", "column": "id", **config},
    )


def run_and_commit(spark, batch: Batch) -> None:
    """What the worker does: run the batch in Spark, commit it with the value its data reported."""
    result = run_spark(spark, batch)
    lifecycle.batch_succeed(
        batch_id=batch.pk,
        attempt=batch.attempt,
        result=result,
        watermark_value=result.get("watermark"),
    )
