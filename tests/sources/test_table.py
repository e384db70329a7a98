"""`table` connectors: a table of another PostgreSQL database read by an integer or timestamp column.

The source is a real database of its own on the test server (created and dropped here), reached
through a DSN in an environment variable; batches are read by real Spark and written to a real
PostgreSQL sink.
"""

from datetime import datetime, timedelta

import psycopg2
import pytest
from psycopg2 import sql as psql

from inventory.models import Asset, Backfill, Batch, BatchStatus, Connector, Watermark
from inventory.services import lifecycle
from inventory.services.discovery import discover
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_create
from inventory.services.outputs import control_plane_dsn
from inventory.sources import table as table_source
from tests.support.api_support import token_client
from tests.support.files_job import run_spark
from tests.support.query_plans import plan_nodes
from tests.support.sink_database import sink_cursor
from tests.support.table_source import (
    SINK_ENV,
    SOURCE_ENV,
    T0,
    insert,
    run_and_commit,
    table_connector,
)
from workers.spark.errors import BatchError

pytestmark = pytest.mark.django_db(transaction=True)


def slices(connector):
    return list(
        Asset.objects.filter(connector=connector).order_by("id").values_list("weight", "extra")
    )


def test_discovery_cuts_the_new_rows_into_slices_of_at_most_slice_rows(source_dsn):
    insert(source_dsn, range(1, 26))
    connector = table_connector(slice_rows=10)
    assert connector.config["column_type"] == "int"
    assert discover(connector) == 3
    assert slices(connector) == [
        (10, {"lower": 1, "upper": 11}),
        (10, {"lower": 11, "upper": 21}),
        (5, {"lower": 21, "upper": 26}),
    ]
    assert discover(connector) == 0  # nothing new: nothing registered, no id spent
    insert(source_dsn, range(26, 31))
    assert discover(connector) == 1
    assert slices(connector)[-1] == (5, {"lower": 26, "upper": 31})


def test_a_value_shared_by_more_rows_than_slice_rows_is_one_slice(source_dsn):
    same = T0 + timedelta(hours=1)
    insert(source_dsn, range(1, 8), at=same)
    insert(source_dsn, [8, 9])
    connector = table_connector(column="updated_at", slice_rows=3)
    assert connector.config["column_type"] == "timestamptz"
    discover(connector)
    weights = [weight for weight, _extra in slices(connector)]
    # rows 8 and 9 (T0+8s, T0+9s) come first, then the seven rows sharing one instant
    assert weights == [2, 7]
    assert sum(weights) == 9


def test_lag_keeps_the_newest_values_out_until_they_are_old_enough(source_dsn):
    insert(source_dsn, range(1, 11))  # updated_at T0+1s .. T0+10s
    connector = table_connector(column="updated_at", slice_rows=100, lag=5)
    discover(connector)
    ((rows, extra),) = slices(connector)
    assert rows == 5  # T0+1s .. T0+5s: the source's maximum (T0+10s) minus the lag
    assert datetime.fromisoformat(extra["upper"]) == T0 + timedelta(seconds=5, microseconds=1)


def test_planning_is_gap_free_and_within_the_row_budget(source_dsn):
    insert(source_dsn, range(1, 101))
    connector = table_connector(slice_rows=10)
    discover(connector)
    job = job_create(name="orders-copy", connector=connector, batch_weight=30, max_items=100)
    planned = []
    while (batch := lifecycle.batch_acquire(job=job, worker="t")) is not None:
        planned.append(batch)
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
    assert [b.weight for b in planned] == [30, 30, 30, 10]
    spans = [(b.span.lower, b.span.upper) for b in planned]
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


@pytest.mark.parametrize(
    ("config", "field", "reason"),
    [
        ({"dsn_env": "TM_TEST_NOT_SET"}, "config.dsn_env", "is not set"),
        ({"column": "nope"}, "config.column", "no column nope"),
        ({"column": "note"}, "config.column", "integer or timestamp"),
        ({"table": "missing"}, "config.table", "does not exist"),
        ({"table": "a.b.c"}, "config.table", "schema.table"),
        ({"slice_rows": 0}, "config.slice_rows", "positive"),
        ({"password": "x"}, "config.password", ""),
    ],
)
def test_bad_configs_are_a_400_naming_the_field(source_dsn, role_users, config, field, reason):
    api = token_client(role_users["admin"])
    body = {
        "name": "bad-table",
        "kind": "table",
        "config": {"dsn_env": SOURCE_ENV, "table": "orders", "column": "id", **config},
    }
    response = api.post("/api/v1/connectors/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert reason in str(response.json()[field])


@pytest.mark.parametrize(
    ("table", "column", "shown"),
    [
        ("pg_catalog.pg_authid", "rolconnlimit", "pg_catalog.pg_authid"),
        ("pg_authid", "rolconnlimit", "pg_catalog.pg_authid"),  # search_path: pg_catalog first
        ("pg_database", "datconnlimit", "pg_catalog.pg_database"),
        ("information_schema.sql_sizing", "sizing_id", "information_schema.sql_sizing"),
    ],
)
def test_a_system_catalog_of_another_database_is_no_source(
    source_dsn, role_users, table, column, shown
):
    """The shared catalogs are one per server: through a database of its own on Tidemark's
    server, pg_authid would hand out every role's password hash, Tidemark's included."""
    api = token_client(role_users["admin"])
    body = {
        "name": "catalog",
        "kind": "table",
        "config": {"dsn_env": SOURCE_ENV, "table": table, "column": column},
    }
    response = api.post("/api/v1/connectors/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {
        "config.table": [f"{shown} is a system catalog; it cannot be a source"]
    }
    assert not Connector.objects.filter(name="catalog").exists()


def test_an_unreachable_source_is_a_400_and_the_dsn_is_never_shown(monkeypatch, role_users):
    monkeypatch.setenv(
        SOURCE_ENV, "host=127.0.0.1 port=1 dbname=x user=u password=hunter2 connect_timeout=2"
    )
    api = token_client(role_users["admin"])
    body = {
        "name": "unreachable",
        "kind": "table",
        "config": {"dsn_env": SOURCE_ENV, "table": "orders", "column": "id"},
    }
    response = api.post("/api/v1/connectors/", body, format="json")
    assert response.status_code == 400
    assert "cannot connect" in str(response.json()["config.dsn_env"])
    assert "hunter2" not in response.content.decode()


def test_tidemark_tables_are_refused_through_a_dsn_to_its_own_database(monkeypatch):
    monkeypatch.setenv(SOURCE_ENV, control_plane_dsn())
    with pytest.raises(InvalidInput) as refused:
        table_connector(table="inventory_batch")
    assert refused.value.field == "config.table"
    assert "Tidemark's own" in refused.value.message


def _sink(table: str) -> dict:
    return {"kind": "postgres", "dsn_env": SINK_ENV, "table": table, "key": ["id"]}


def _sink_rows(table: str) -> list[tuple]:
    with sink_cursor() as cursor:
        cursor.execute(f'SELECT id, amount FROM "{table}" ORDER BY id')
        return cursor.fetchall()


def drain(spark, job) -> list[Batch]:
    done = []
    while (batch := lifecycle.batch_acquire(job=job, worker="t")) is not None:
        run_and_commit(spark, batch)
        done.append(batch)
    return done


def test_rows_inserted_while_batches_run_and_late_rows_in_the_lookback_land_once(spark, source_dsn):
    insert(source_dsn, range(1, 41))
    connector = table_connector(column="updated_at", slice_rows=10)
    job = job_create(
        name="orders-by-time",
        connector=connector,
        batch_weight=20,
        max_items=10,
        watermark_type="datetime",
        lookback=30,
        sink=_sink("orders_by_time"),
    )
    discover(connector)
    first = lifecycle.batch_acquire(job=job, worker="t")
    # rows land while the first batch runs: the next look registers them
    insert(source_dsn, range(41, 61))
    run_and_commit(spark, first)
    discover(connector)
    drain(spark, job)
    assert _sink_rows("orders_by_time") == [(i, 1) for i in range(1, 61)]

    # late data: rows 5 and 50 are updated with timestamps *below* what is registered but inside
    # the lookback window of the next batch; row 61 is new
    late = T0 + timedelta(seconds=59, microseconds=500)
    insert(source_dsn, [50], at=late, amount=2)
    insert(source_dsn, [61])
    discover(connector)
    drain(spark, job)
    rows = dict(_sink_rows("orders_by_time"))
    assert sorted(rows) == list(range(1, 62))  # each source row once
    assert rows[50] == 2  # the late update, re-read by the lookback, won
    watermark = Watermark.objects.get(job=job)
    assert watermark.value is not None, watermark.value
    assert datetime.fromisoformat(watermark.value) == T0 + timedelta(seconds=61)
    assert not Batch.objects.filter(job=job).exclude(status=BatchStatus.SUCCEEDED).exists()


def test_a_missing_column_at_read_time_fails_the_batch_with_the_error_stored(spark, source_dsn):
    insert(source_dsn, range(1, 6))
    connector = table_connector(slice_rows=10)
    job = job_create(
        name="orders-broken", connector=connector, batch_weight=100, sink=_sink("broken")
    )
    discover(connector)
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute("ALTER TABLE orders RENAME COLUMN id TO order_id")
    batch = lifecycle.batch_acquire(job=job, worker="t")

    with pytest.raises(BatchError) as failed:
        run_spark(spark, batch)
    assert "id" in failed.value.message and failed.value.stage == "read"


def test_a_reset_forgets_the_slices_and_looks_again_from_the_start(source_dsn):
    from inventory.services.connectors import connector_reset

    insert(source_dsn, range(1, 21))
    connector = table_connector(slice_rows=10)
    job = job_create(name="orders-reset", connector=connector, batch_weight=100)
    discover(connector)
    batch = lifecycle.batch_acquire(job=job, worker="t")
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
    connector = connector_reset(
        connector=connector,
        config={**connector.config, "start_value": 11},
        actor="alice",
        reason="the first ten orders were a test load",
    )
    assert connector.cursor == {} and not Asset.objects.filter(connector=connector).exists()
    assert discover(connector) == 1
    assert slices(connector) == [(10, {"lower": 11, "upper": 21})]
    assert Watermark.objects.get(job=job).position == job.start_position


def test_late_rows_inside_the_lookback_reach_the_sink_with_nothing_newer(spark, source_dsn):
    insert(source_dsn, range(1, 41))
    connector = table_connector(name="orders-late", column="updated_at", slice_rows=10)
    job = job_create(
        name="orders-late-rows",
        connector=connector,
        batch_weight=100,
        max_items=10,
        watermark_type="datetime",
        lookback=30,
        sink=_sink("orders_late_rows"),
    )
    discover(connector)
    drain(spark, job)
    assert _sink_rows("orders_late_rows") == [(i, 1) for i in range(1, 41)]
    watermark_before = Watermark.objects.values_list("position", "value").get(job=job)

    # rows 5 and 41 commit late, with times inside the last registered slice; nothing newer
    late = T0 + timedelta(seconds=39, microseconds=500)
    insert(source_dsn, [5], at=late, amount=2)
    insert(source_dsn, [41], at=late, amount=3)
    assert discover(connector) == 0  # no new slice: without a restatement nothing would run
    restated = Backfill.objects.get(job=job)
    assert restated.reason.startswith("late rows:") and restated.created_by == "tidemark"
    drain(spark, job)
    rows = dict(_sink_rows("orders_late_rows"))
    assert sorted(rows) == list(range(1, 42))  # each source row once
    assert (rows[5], rows[41]) == (2, 3)
    assert Watermark.objects.values_list("position", "value").get(job=job) == watermark_before

    # the recount is recorded: the next look restates nothing more
    discover(connector)
    assert Backfill.objects.filter(job=job).count() == 1


def test_late_rows_before_the_first_slice_inside_the_lookback_reach_the_sink_at_the_next_look(
    spark, source_dsn
):
    # the first look starts at the column's minimum; 20 rows then commit with times inside the
    # lookback but before it: no registered slice holds them, so no recount saw them and they
    # stayed out of the sink until a newer row came (and only within that batch's lookback)
    insert(source_dsn, range(1, 41))
    connector = table_connector(name="orders-early", column="updated_at", slice_rows=10)
    job = job_create(
        name="orders-early-rows",
        connector=connector,
        batch_weight=100,
        max_items=10,
        watermark_type="datetime",
        lookback=120,
        sink=_sink("orders_early_rows"),
    )
    assert discover(connector) == 4
    drain(spark, job)
    assert _sink_rows("orders_early_rows") == [(i, 1) for i in range(1, 41)]

    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        for i in range(101, 121):  # 20 late rows, 1..20 s before the first row's time
            cursor.execute(
                "INSERT INTO orders VALUES (%s, 5, 'late', %s)",
                [i, T0 - timedelta(seconds=i - 100)],
            )
    assert discover(connector) == 2  # two slices of at most 10 rows, before the first one
    drain(spark, job)
    rows = dict(_sink_rows("orders_early_rows"))
    assert sorted(rows) == [*range(1, 41), *range(101, 121)]  # each source row once
    assert all(rows[i] == 5 for i in range(101, 121))
    watermark = Watermark.objects.get(job=job)
    assert datetime.fromisoformat(watermark.value) == T0 + timedelta(seconds=40)

    # more rows before them later: slices of a registered range now, recounted as late rows
    assert discover(connector) == 0
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(
            "INSERT INTO orders VALUES (121, 6, 'later', %s)",
            [T0 - timedelta(seconds=15, microseconds=500)],
        )
    discover(connector)
    drain(spark, job)
    rows = dict(_sink_rows("orders_early_rows"))
    assert sorted(rows) == [*range(1, 41), *range(101, 122)] and rows[121] == 6

    # rows before the window (older than the lookback allows) are not the sink's to get
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(
            "INSERT INTO orders VALUES (200, 7, 'too old', %s)", [T0 - timedelta(hours=1)]
        )
    assert discover(connector) == 0
    drain(spark, job)
    assert 200 not in dict(_sink_rows("orders_early_rows"))


@pytest.mark.parametrize("column_type", ["timestamptz", "timestamp"])
def test_values_a_datetime_cannot_hold_are_counted_and_the_rest_flows(
    spark, source_dsn, role_users, column_type
):
    """NULL, 'infinity', '-infinity' and a year past 9999 order no slice: discovery slices the rest,
    counts them on the connector (`unreadable_rows`, shown by the API) and the other rows reach
    the sink. A sentinel at the very end of year 9999 is an ordinary value, also when the source
    role's TimeZone is ahead of UTC (where that instant reads as year 10000)."""
    name = source_dsn.split("dbname='")[1].split("'")[0]
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE \"{name}\" SET timezone TO 'Asia/Kolkata'")
        cursor.execute("ALTER TABLE orders ALTER COLUMN updated_at DROP NOT NULL")
        if column_type == "timestamp":
            cursor.execute("ALTER TABLE orders ALTER COLUMN updated_at TYPE timestamp")
    insert(source_dsn, range(1, 6))
    end_of_9999 = "9999-12-31 23:30:00" + ("+00" if column_type == "timestamptz" else "")
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        for key, value in ((90, end_of_9999), (96, None), (97, "-infinity"), (98, "infinity")):
            cursor.execute("INSERT INTO orders VALUES (%s, 1, 'x', %s)", [key, value])
        # past 9999 in any time zone
        cursor.execute("INSERT INTO orders VALUES (99, 1, 'x', '10000-01-02 12:00')")
    connector = table_connector(name=f"orders-inf-{column_type}", column="updated_at", slice_rows=2)
    assert connector.config["column_type"] == column_type
    admin = token_client(role_users["admin"])
    response = admin.post(f"/api/v1/connectors/{connector.name}/discover/")
    assert response.status_code == 200, response.content
    assert response.json()["registered"] == 3  # rows 1-2, 3-4, then 5 and the end of 9999
    shown = admin.get(f"/api/v1/connectors/{connector.name}/").json()
    assert shown["cursor"]["unreadable_rows"] == 4
    job = job_create(
        name=f"orders-inf-{column_type}",
        connector=connector,
        batch_weight=100,
        watermark_type="datetime",
        sink=_sink(f"orders_inf_{column_type}"),
    )
    connector.refresh_from_db()
    drain(spark, job)
    assert _sink_rows(f"orders_inf_{column_type}") == [(i, 1) for i in (1, 2, 3, 4, 5, 90)]
    # the unreadable rows leave: the count goes with them
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute("DELETE FROM orders WHERE id IN (96, 97, 98, 99)")
    assert discover(connector) == 0
    connector.refresh_from_db()
    assert "unreadable_rows" not in connector.cursor


def test_rows_whose_integer_column_is_null_are_counted_on_the_connector(source_dsn):
    insert(source_dsn, range(1, 4))
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute("ALTER TABLE orders ADD COLUMN seq bigint")
        cursor.execute("UPDATE orders SET seq = id WHERE id < 3")
    connector = table_connector(name="orders-seq", column="seq", slice_rows=10)
    assert connector.config["column_type"] == "int"
    assert discover(connector) == 1
    assert slices(connector) == [(2, {"lower": 1, "upper": 3})]
    connector.refresh_from_db()
    assert connector.cursor["unreadable_rows"] == 1


def test_a_row_holding_a_timestamp_spark_cannot_read_fails_the_batch_naming_the_slice(
    spark, source_dsn
):
    insert(source_dsn, range(1, 4))
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute("ALTER TABLE orders ADD COLUMN shipped_at timestamptz")
        cursor.execute("UPDATE orders SET shipped_at = '10000-01-02 00:00+00' WHERE id = 2")
    connector = table_connector(name="orders-shipped", slice_rows=10)
    job = job_create(
        name="orders-shipped", connector=connector, batch_weight=100, sink=_sink("shipped")
    )
    discover(connector)
    batch = lifecycle.batch_acquire(job=job, worker="t")
    with pytest.raises(BatchError) as failed:
        run_spark(spark, batch)
    assert failed.value.stage == "read"
    assert "orders" in failed.value.message and "10000" in failed.value.message


@pytest.mark.parametrize("column, column_type", [("updated_at", "timestamptz"), ("id", "int")])
def test_a_looks_bounds_are_read_by_the_columns_index_alone(source_dsn, column, column_type):
    """The smallest and largest value and the count of rows no slice holds: index probes, never a
    read of the table (sequential scans priced out: a statement the index cannot answer then reads
    a whole index with a filter, which has no index condition)."""
    insert(source_dsn, range(1, 50))
    config = {"table": "orders", "column": column, "column_type": column_type}
    statement = table_source._statements(config)["bounds"]
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute(
            psql.Composed([psql.SQL("EXPLAIN (FORMAT JSON) "), statement]),
            table_source._time_domain(column_type),
        )
        plan = cursor.fetchone()[0][0]["Plan"]
    scans = [node for node in plan_nodes(plan) if node["Node Type"].endswith("Scan")]
    index_scans = [n for n in scans if n["Node Type"] != "Bitmap Heap Scan"]
    assert index_scans, scans
    # a probe: an index searched by a condition on the column, never read whole with a filter
    assert all("Index Cond" in node for node in index_scans), scans
