"""A meta table in another database, read through its own connection (DSN by environment variable):
its rows are registered in uid order up to the visibility horizon, Tidemark's tables are refused
even when the DSN points at Tidemark's database, and the batches read the files it names."""

import threading

import psycopg2
import pytest

from inventory.models import Asset, Connector
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_create
from inventory.services.outputs import control_plane_dsn
from tests.support.files_job import run_spark
from tests.support.table_source import SOURCE_ENV
from tests.support.worker_fixtures import write_orders

pytestmark = pytest.mark.django_db(transaction=True)


def _catalog(dsn: str) -> None:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE landed (uid serial PRIMARY KEY, path text, bytes bigint)")


def _land(dsn: str, path, *, conn=None) -> None:
    own = conn is None
    conn = conn or psycopg2.connect(dsn)
    with conn.cursor() as cursor:
        cursor.execute("INSERT INTO landed (path, bytes) VALUES (%s, %s)", [str(path), 100])
    if own:
        conn.commit()
        conn.close()


def _connector(name="catalog", **meta):
    return connector_create(
        name=name,
        kind="files",
        config={
            "dsn_env": SOURCE_ENV,
            "meta_table": {
                "table": "landed",
                "uid_column": "uid",
                "item_column": "path",
                "weight_column": "bytes",
                **meta,
            },
        },
    )


def test_rows_are_registered_in_uid_order_and_only_once(source_dsn, tmp_path):
    _catalog(source_dsn)
    for n in range(3):
        _land(source_dsn, tmp_path / f"{n}.parquet")
    connector = _connector()
    assert discover(connector) == 3
    assert discover(connector) == 0
    _land(source_dsn, tmp_path / "3.parquet")
    assert discover(connector) == 1
    assets = list(Asset.objects.filter(connector=connector).order_by("id"))
    assert [a.extra["uid"] for a in assets] == [1, 2, 3, 4]
    assert [a.location for a in assets] == [str(tmp_path / f"{n}.parquet") for n in range(4)]
    assert connector.cursor == {"uid": 4}


def test_discovery_stops_before_a_row_whose_smaller_uid_may_still_commit(
    source_dsn,
    tmp_path,
):
    _catalog(source_dsn)
    _land(source_dsn, tmp_path / "a.parquet")  # uid 1
    slow = psycopg2.connect(source_dsn)
    _land(source_dsn, tmp_path / "b.parquet", conn=slow)  # uid 2, not committed yet
    _land(source_dsn, tmp_path / "c.parquet")  # uid 3, committed first
    connector = _connector()
    assert discover(connector) == 1  # uid 3 waits: uid 2 is still being written
    slow.commit()
    slow.close()
    assert discover(connector) == 2
    uids = list(
        Asset.objects.filter(connector=connector)
        .order_by("id")
        .values_list("extra__uid", flat=True)
    )
    assert uids == [1, 2, 3]


def test_tidemark_tables_are_refused_when_the_dsn_is_tidemarks_own(monkeypatch, role_users):
    monkeypatch.setenv(SOURCE_ENV, control_plane_dsn())
    for table, item in (("authtoken_token", "key"), ("auth_user", "password")):
        with pytest.raises(InvalidInput) as refused:
            connector_create(
                name=f"steal-{table}".replace("_", "-"),
                kind="files",
                config={
                    "dsn_env": SOURCE_ENV,
                    "meta_table": {
                        "table": table,
                        "uid_column": "user_id" if table == "authtoken_token" else "id",
                        "item_column": item,
                        "weight_column": None,
                    },
                },
            )
        assert refused.value.field == "config.meta_table.table"


def test_a_missing_column_is_a_clear_error(source_dsn):
    _catalog(source_dsn)
    with pytest.raises(InvalidInput) as refused:
        _connector(item_column="nope")
    assert refused.value.field == "config.meta_table" and "nope" in refused.value.message


def test_a_misspelt_key_of_the_meta_table_is_refused_not_ignored(source_dsn):
    _catalog(source_dsn)
    with pytest.raises(InvalidInput) as refused:
        _connector(filter=[{"column": "bytes", "op": "gt", "value": 0}])
    assert refused.value.field == "config.meta_table.filter"
    assert "filters" in refused.value.message
    assert not Connector.objects.filter(name="catalog").exists()


def test_a_batch_reads_the_files_the_meta_table_names(spark, source_dsn, tmp_path):
    _catalog(source_dsn)
    for n in range(3):
        _land(source_dsn, write_orders(tmp_path / f"o{n}.parquet", first_id=n * 10, count=10))
    connector = _connector()
    discover(connector)
    job = job_create(
        name="catalog-copy",
        connector=connector,
        batch_weight=10**6,
        sink={"kind": "files", "path": str(tmp_path / "out")},
    )
    batch = lifecycle.batch_acquire(job=job, worker="t")
    result = run_spark(spark, batch)
    assert result["rows_in"] == 30


def test_concurrent_looks_register_each_row_once(source_dsn, tmp_path):
    _catalog(source_dsn)
    for n in range(50):
        _land(source_dsn, tmp_path / f"{n}.parquet")
    connector = _connector()
    errors = []

    def look():
        from django.db import connection

        try:
            discover(type(connector).objects.get(pk=connector.pk))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=look) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert Asset.objects.filter(connector=connector).count() == 50
