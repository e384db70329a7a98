"""History then live (Feldera's case): a table's history is loaded first, then a Kafka topic takes
over from the offsets the history was synced to, with no row lost and none doubled at the seam.

The history table (another PostgreSQL database) holds the orders a CDC consumer already copied
from the topic, each with the partition and offset it came from. The `kafka` connector starts
after the snapshot connector completes and takes its first offsets from that data; both jobs
append into one sink table, so a row read twice would be there twice.
"""

import json

import psycopg2
import pytest

from inventory.models import ConnectorEvent, ConnectorState
from inventory.services import lifecycle, scheduling
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.jobs import job_create
from tests.support.sink_database import sink_cursor
from tests.support.table_source import SINK_ENV, SOURCE_ENV, run_and_commit

pytestmark = pytest.mark.django_db(transaction=True)

PARSE = (
    "SELECT r.id, r.amount FROM (SELECT from_json(CAST(value AS STRING), "
    "'id BIGINT, amount INT') AS r FROM batch)"
)


def drain(spark, job) -> int:
    done = 0
    while (batch := lifecycle.batch_acquire(job=job, worker="t")) is not None:
        run_and_commit(spark, batch)
        done += 1
    return done


def test_history_then_live_loses_and_doubles_nothing_at_the_switch(
    spark,
    source_dsn,
    kafka_broker,
):
    topic = kafka_broker.create_topic(partitions=2)
    # orders 1..30 on the topic: order i on partition i % 2, offsets 0, 1, ... per partition
    placed = {}
    for order in range(1, 31):
        partition = order % 2
        offset = sum(1 for p, _o in placed.values() if p == partition)
        placed[order] = (partition, offset)
        kafka_broker.produce(topic, [(partition, json.dumps({"id": order, "amount": 1}).encode())])
    # the history synced partition 0 up to offset 9 and partition 1 up to offset 6
    synced = {0: 10, 1: 7}
    history_orders = [o for o, (p, off) in placed.items() if off < synced[p]]
    with psycopg2.connect(source_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE orders_history (id bigint PRIMARY KEY, amount int, part int, off bigint)"
        )
        for order in history_orders:
            cursor.execute(
                "INSERT INTO orders_history VALUES (%s, 1, %s, %s)", [order, *placed[order]]
            )

    history = connector_create(
        name="orders-history",
        kind="table",
        config={
            "dsn_env": SOURCE_ENV,
            "table": "orders_history",
            "column": "id",
            "slice_rows": 4,
            "snapshot": True,
        },
    )
    live = connector_create(
        name="orders-live",
        kind="kafka",
        start_after="orders-history",
        config={
            "bootstrap_servers": kafka_broker.bootstrap,
            "topic": topic,
            "slice_messages": 5,
            "handover": {"partition_column": "part", "offset_column": "off"},
        },
    )
    assert live.state == ConnectorState.WAITING
    sink = {"kind": "postgres", "dsn_env": SINK_ENV, "table": "orders_all", "mode": "append"}
    history_job = job_create(
        name="load-history",
        connector=history,
        batch_weight=8,
        processor="sql",
        params={"query": "SELECT id, amount FROM batch"},
        sink=sink,
    )
    live_job = job_create(
        name="follow-live",
        connector=live,
        batch_weight=6,
        watermark_type="key_value",
        processor="sql",
        params={"query": PARSE},
        sink=sink,
    )

    assert discover(live) == 0  # waiting: registers nothing before the hand-over
    discover(history)
    drain(spark, history_job)
    assert scheduling.connectors_orchestrate() == ["orders-live"]
    live.refresh_from_db()
    assert live.state == ConnectorState.ACTIVE
    assert live.cursor == {"0": 10, "1": 7}
    release = ConnectorEvent.objects.get(connector=live)
    assert "synced" in release.reason

    # more orders arrive on the live topic after the switch
    for order in range(31, 35):
        kafka_broker.produce(topic, [(order % 2, json.dumps({"id": order, "amount": 1}).encode())])
    while discover(live):
        pass
    drain(spark, live_job)

    with sink_cursor() as cursor:
        cursor.execute("SELECT id, count(*) FROM orders_all GROUP BY id ORDER BY id")
        counts = dict(cursor.fetchall())
    assert sorted(counts) == list(range(1, 35))  # none lost
    assert set(counts.values()) == {1}  # none doubled
    history.refresh_from_db()
    assert history.state == ConnectorState.COMPLETED
    assert live_job.watermark.__class__.objects.get(job=live_job).value == {"0": 17, "1": 17}
