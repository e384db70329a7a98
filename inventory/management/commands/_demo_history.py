"""The demo's history-then-live scenario: a table's history, then a live Kafka topic.

The connectors and jobs are declared in examples/demo/history-then-live.yaml. A CDC consumer has copied the first orders of a topic into a table of another database
(`tidemark_demo_source.orders_history`, each row with the partition and offset it came from). A
snapshot `table` connector loads that history; a `kafka` connector waits for it (start_after),
then starts from the offsets the history was synced to (handover) and follows the topic. Both
jobs append into one table, `demo_orders_all`, so an order read twice would be there twice.
"""

import contextlib
import json
import os
import time

import psycopg2
from django.core.management.base import CommandError
from django.db import connection

from controlplane.embedded_kafka import tansu_binary, tansu_start
from controlplane.loopback import free_port, listening
from inventory.models import Batch, BatchStatus, Connector, ConnectorState, Job
from inventory.services import dispatch, lifecycle, scheduling
from inventory.services.connectors import connector_delete
from inventory.services.discovery import discover
from inventory.services.jobs import job_delete
from inventory.services.outputs import control_plane_dsn

SOURCE_DB = "tidemark_demo_source"
SOURCE_DSN_ENV = "DEMO_SOURCE_DSN"
HISTORY = "demo-orders-history"
LIVE = "demo-orders-live"
HISTORY_JOB = "demo-load-history"
LIVE_JOB = "demo-follow-live"
ALL_TABLE = "demo_orders_all"
TOPIC = "demo-orders"
PARTITIONS = 2
ORDERS = 40
SYNCED = {0: 12, 1: 9}  # offsets the history was synced to (exclusive), per partition
LATER = 6  # orders that arrive on the topic after the switch


def available() -> bool:
    return tansu_binary() is not None


# the variable naming the demo's sink database (demo.py creates it; never Tidemark's own)
SINK_DSN_ENV = "DEMO_SINK_DSN"


@contextlib.contextmanager
def sink_cursor():
    """A cursor on the demo's sink database (autocommit)."""
    conn = psycopg2.connect(os.environ[SINK_DSN_ENV])
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            yield cursor
    finally:
        conn.close()


class HistoryThenLive:
    def __init__(self, command):
        self.cmd = command
        self.bootstrap = ""

    # ---- before the worker starts: a fresh source database and the broker -------------------

    def prepare(self, logs) -> None:
        self._reset()
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{SOURCE_DB}" WITH (FORCE)')
            cursor.execute(f'CREATE DATABASE "{SOURCE_DB}"')
        port = free_port()
        proc = tansu_start(port=port, log_path=logs / "tansu.log", cwd=logs)
        self.cmd.children.append(("kafka broker", proc))
        self.bootstrap = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise CommandError(f"the Tansu broker did not start; see {logs / 'tansu.log'}")
            time.sleep(0.2)

    def _reset(self) -> None:
        for job in Job.objects.filter(name__in=[HISTORY_JOB, LIVE_JOB]):
            lifecycle.batches_cancel(Batch.objects.filter(job=job), statuses=(BatchStatus.RUNNING,))
            job_delete(job=job)
        # the live connector first: its start_after names the history, which is kept while named
        for name in (LIVE, HISTORY):
            for connector in Connector.objects.filter(name=name):
                connector_delete(connector=connector)
        with sink_cursor() as cursor:
            cursor.execute(f'DROP TABLE IF EXISTS "{ALL_TABLE}"')

    # ---- the scenario --------------------------------------------------------------------------

    def run(self) -> None:
        say = self.cmd._say
        self._create_topic()
        placed = self._produce(range(1, ORDERS + 1))
        history_rows = self._history(placed)
        say(
            "6. history then live",
            f"{ORDERS} orders on topic {TOPIC} ({PARTITIONS} partitions); {history_rows} of them "
            f"already copied into {SOURCE_DB}.orders_history with the offsets they came from",
        )
        history, live, history_job, live_job = self._pipeline()
        self.cmd.stdout.write(
            f"   {LIVE} is {live.state}: it starts after {HISTORY} (a snapshot) completes"
        )
        discover(history)
        self._run(history_job, "history")
        released = scheduling.connectors_orchestrate()
        live.refresh_from_db()
        history.refresh_from_db()
        event = live.events.first()
        if LIVE in released:
            what = f"released {', '.join(released)}"
        elif live.state == ConnectorState.ACTIVE:
            # beat orchestrates every few seconds too and may have come first
            what = f"released {LIVE} (by beat's periodic look, a moment before this one)"
        else:
            what = f"{LIVE} is still {live.state}"
        self.cmd.stdout.write(
            f"   {HISTORY} is {history.state}; {what}: {event.reason if event else ''}"
        )
        self._produce(range(ORDERS + 1, ORDERS + LATER + 1))
        self.cmd.stdout.write(f"   {LATER} more orders arrived on the topic after the switch")
        while discover(live):
            pass
        self._run(live_job, "live")
        with sink_cursor() as cursor:
            cursor.execute(
                f'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM "{ALL_TABLE}"'
            )
            rows, distinct, first, last = cursor.fetchone()
        expected = ORDERS + LATER
        verdict = "yes" if rows == distinct == expected and (first, last) == (1, expected) else "NO"
        self.cmd.stdout.write(
            f"   {ALL_TABLE}: {rows} rows, {distinct} distinct orders ({first}..{last}); every "
            f"order exactly once across the switch: {verdict}"
        )
        if verdict != "yes":
            raise CommandError(f"history then live: expected orders 1..{expected} once each")

    def _produce(self, orders) -> dict:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        placed = {}
        for order in orders:
            partition = order % PARTITIONS
            value = {"id": order, "customer": f"c{order % 7}", "amount": round(order * 1.5, 2)}
            delivered = {}

            def done(error, message, delivered=delivered):
                delivered["error"], delivered["offset"] = error, message.offset()

            # one record per produce call: Tansu reports a partition's end exactly then
            producer.produce(
                TOPIC, json.dumps(value).encode(), partition=partition, on_delivery=done
            )
            producer.flush(10)
            if delivered.get("error") is not None or "offset" not in delivered:
                raise CommandError(f"producing order {order} failed: {delivered.get('error')}")
            placed[order] = (partition, delivered["offset"])
        return placed

    def _history(self, placed: dict) -> int:
        rows = [(o, p, off) for o, (p, off) in placed.items() if off < SYNCED[p]]
        with psycopg2.connect(control_plane_dsn(dbname=SOURCE_DB)) as conn, conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE orders_history (id bigint PRIMARY KEY, customer text, "
                "amount double precision, part int, off bigint)"
            )
            for order, partition, offset in rows:
                cur.execute(
                    "INSERT INTO orders_history VALUES (%s, %s, %s, %s, %s)",
                    [order, f"c{order % 7}", round(order * 1.5, 2), partition, offset],
                )
        return len(rows)

    def _pipeline(self):
        """examples/demo/history-then-live.yaml, applied now that its table and topic exist."""
        self.cmd.apply_pipelines("history-then-live.yaml", kafka_bootstrap=self.bootstrap)
        history = Connector.objects.get(name=HISTORY)
        live = Connector.objects.get(name=LIVE)
        return history, live, Job.objects.get(name=HISTORY_JOB), Job.objects.get(name=LIVE_JOB)

    def _create_topic(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            try:
                future.result(timeout=10)
            except Exception as exc:  # an existing topic from a previous look is fine
                if "exist" not in str(exc).lower():
                    raise

    def _run(self, job: Job, what: str) -> None:
        dispatch.job_run(job=job)
        started = time.monotonic()
        while True:
            self.cmd._check_children()
            open_ = Batch.objects.filter(
                job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED]
            )
            dead = Batch.objects.filter(job=job, status=BatchStatus.DEAD).first()
            if dead is not None:
                raise CommandError(
                    f"batch {dead.pk} of {job.name} died: {dead.error.get('message')}"
                )
            if not open_.exists() and Batch.objects.filter(job=job).exists():
                # the worker plans the next batch after each commit: settled when none is left
                dispatch.job_run(job=job)
                if not open_.exists():
                    break
            if time.monotonic() - started > self.cmd.timeout:
                raise CommandError(f"the {what} load took longer than {self.cmd.timeout} s")
            time.sleep(0.5)
        job.watermark.refresh_from_db()
        done = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).count()
        self.cmd.stdout.write(
            f"   {job.name:20} {done} batch(es) in {time.monotonic() - started:.1f} s; "
            f"watermark -> {job.watermark.value}"
        )
