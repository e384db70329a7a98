"""Kafka connectors against a real broker (Tansu) and a real Celery worker running PySpark.

A topic is registered as offset slices per partition; batches are asset-id ranges over them; the
job's key_value watermark ends at each partition's end offset; every message reaches the sink
exactly once, across runs, for partitions the connector learns of later and through the broker's
under-reported end offsets; bad configs and lost offsets are clear errors that lose nothing.
"""

import socket
from collections import Counter

import pytest

from inventory.models import Asset, Batch, BatchStatus, Connector, Watermark
from inventory.services import dispatch
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.errors import InvalidInput
from inventory.sources.kafka import handover_set, next_offsets, plan_slices
from tests.api_support import token_client
from tests.factories import ConnectorFactory, make_job
from tests.worker_fixtures import read_sink, wait_until
from workers.spark.errors import ReadError
from workers.spark.sources import kafka as read_kafka
from workers.spark.sources.kafka_client import below_log_start

on_worker = pytest.mark.django_db(transaction=True)


def _connector(broker, topic: str, name: str, **config) -> Connector:
    return connector_create(
        name=name,
        kind="kafka",
        config={"bootstrap_servers": broker.bootstrap, "topic": topic, **config},
    )


def _job(connector, name: str, sink, **options):
    options = {"batch_weight": 8, "max_items": 3, **options}
    return make_job(
        connector=connector,
        name=name,
        watermark_type="key_value",
        sink={"kind": "files", "path": str(sink)},
        **options,
    )


def _run_until(job, expected: dict, *, timeout: float = 120) -> None:
    dispatch.job_run(job=job)

    def settled():
        busy = Batch.objects.filter(job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING])
        return Watermark.objects.get(job=job).value == expected and not busy.exists()

    wait_until(settled, timeout=timeout, message=f"job {job.name} to reach {expected}")


def _sink_messages(sink) -> Counter:
    return Counter((row["partition"], row["offset"]) for row in read_sink(sink))


def _everything(ends: dict) -> set:
    return {(p, o) for p, end in ends.items() for o in range(end)}


def _produce(broker, topic: str, counts: dict, *, first: dict | None = None, **options) -> None:
    first = first or {}
    broker.produce(
        topic,
        [
            (p, f"m{first.get(p, 0) + n}".encode())
            for p, count in counts.items()
            for n in range(count)
        ],
        **options,
    )


# ---- a topic over several runs -----------------------------------------------------------------


@on_worker
def test_a_topic_is_read_over_several_runs_each_message_once(kafka_broker, celery_worker, tmp_path):
    topic = kafka_broker.create_topic(partitions=3)
    _produce(kafka_broker, topic, {0: 10, 1: 7, 2: 3})
    connector = _connector(kafka_broker, topic, "kafka-runs", slice_messages=4)

    assert discover(connector) == 6
    connector.refresh_from_db()
    assert connector.cursor == {"0": 10, "1": 7, "2": 3}
    slices = list(Asset.objects.filter(connector=connector).order_by("id"))
    # interleaved: every partition's first slice before any partition's second
    assert [(a.extra["partition"], a.extra["start"], a.extra["end"]) for a in slices] == [
        (0, 0, 4),
        (1, 0, 4),
        (2, 0, 3),
        (0, 4, 8),
        (1, 4, 7),
        (0, 8, 10),
    ]
    assert [a.weight for a in slices] == [4, 4, 3, 4, 3, 2]
    assert slices[0].location == f"kafka://{topic}/0/0-4"

    sink = tmp_path / "sink"
    job = _job(connector, "kafka-runs-copy", sink)
    _run_until(job, {"0": 10, "1": 7, "2": 3})
    first = _sink_messages(sink)
    assert set(first) == _everything({0: 10, 1: 7, 2: 3}) and set(first.values()) == {1}
    batches = list(Batch.objects.filter(job=job).order_by("span"))
    assert len(batches) > 1 and all(b.status == BatchStatus.SUCCEEDED for b in batches)
    # a batch reports only the partitions it read; the job's watermark keeps the others
    assert any(set(b.watermark_value) != {"0", "1", "2"} for b in batches)

    # more messages, a later discovery, a later run: only the new ones are read
    _produce(kafka_broker, topic, {0: 2, 2: 5}, first={0: 10, 2: 3})
    assert discover(connector) == 3  # 0:[10,12), 2:[3,7), 2:[7,8)
    _run_until(job, {"0": 12, "1": 7, "2": 8})
    rows = read_sink(sink)
    counts = Counter((row["partition"], row["offset"]) for row in rows)
    assert set(counts) == _everything({0: 12, 1: 7, 2: 8}) and set(counts.values()) == {1}
    assert {row["value"] for row in rows if row["partition"] == 2} == {
        f"m{n}".encode() for n in range(8)
    }
    assert all(row["topic"] == topic for row in rows)
    assert discover(connector) == 0


@on_worker
def test_a_partition_the_cursor_does_not_know_yet_is_read_from_its_earliest_offset(
    kafka_broker, celery_worker, tmp_path
):
    # Tansu refuses CreatePartitions (KIP-195): the partition "added later" is one the cursor has
    # no entry for yet, exactly the state discovery finds after a real partition increase.
    topic = kafka_broker.create_topic(partitions=3)
    _produce(kafka_broker, topic, {0: 3, 1: 3, 2: 4})
    connector = _connector(kafka_broker, topic, "kafka-latest", start_from="latest")
    assert discover(connector) == 0  # latest: what was there before is not read
    connector.refresh_from_db()
    assert connector.cursor == {"0": 3, "1": 3, "2": 4}

    Connector.objects.filter(pk=connector.pk).update(cursor={"0": 3, "1": 3})
    _produce(kafka_broker, topic, {0: 2}, first={0: 3})
    assert discover(connector) == 2
    assert sorted(
        (a.extra["partition"], a.extra["start"], a.extra["end"])
        for a in Asset.objects.filter(connector=connector)
    ) == [(0, 3, 5), (2, 0, 4)]

    sink = tmp_path / "sink"
    _run_until(_job(connector, "kafka-latest-copy", sink), {"0": 5, "2": 4})
    counts = _sink_messages(sink)
    assert set(counts) == {(0, 3), (0, 4), (2, 0), (2, 1), (2, 2), (2, 3)}
    assert set(counts.values()) == {1}


@on_worker
def test_explicit_start_offsets_start_there_and_unnamed_partitions_start_at_the_earliest(
    kafka_broker,
):
    topic = kafka_broker.create_topic(partitions=2)
    _produce(kafka_broker, topic, {0: 6, 1: 2})
    connector = _connector(kafka_broker, topic, "kafka-explicit", start_from={"0": 4})
    assert discover(connector) == 2
    assert sorted(
        (a.extra["partition"], a.extra["start"], a.extra["end"])
        for a in Asset.objects.filter(connector=connector)
    ) == [(0, 4, 6), (1, 0, 2)]


@on_worker
def test_a_producers_batches_under_report_the_end_yet_nothing_is_lost(
    kafka_broker, celery_worker, tmp_path
):
    topic = kafka_broker.create_topic(partitions=1)
    _produce(kafka_broker, topic, {0: 12}, batched=True)
    connector = _connector(kafka_broker, topic, "kafka-quirk", slice_messages=5)
    discover(connector)
    connector.refresh_from_db()
    reported = connector.cursor["0"]
    assert 1 <= reported <= 12  # Tansu reports less than the 12 readable records

    sink = tmp_path / "sink"
    job = _job(connector, "kafka-quirk-copy", sink)
    _run_until(job, {"0": reported})
    # the reader stopped at the slice end, not at the records the partition really holds
    assert set(_sink_messages(sink)) == _everything({0: reported})

    _produce(kafka_broker, topic, {0: 3}, first={0: 12})  # one record per call: reported right
    discover(connector)
    _run_until(job, {"0": 15})
    counts = _sink_messages(sink)
    assert set(counts) == _everything({0: 15}) and set(counts.values()) == {1}


@on_worker
def test_a_connector_handed_over_from_its_history_starts_at_the_synced_offsets(kafka_broker):
    topic = kafka_broker.create_topic(partitions=2)
    _produce(kafka_broker, topic, {0: 5, 1: 2})
    ConnectorFactory(name="kafka-history")  # what start_after names must exist
    connector = connector_create(
        name="kafka-live",
        kind="kafka",
        config={
            "bootstrap_servers": kafka_broker.bootstrap,
            "topic": topic,
            "handover": {"partition_column": "part", "offset_column": "off"},
        },
        start_after="kafka-history",
    )
    assert connector.state == "waiting"
    assert discover(connector) == 0  # waiting: the history decides where it starts
    connector.refresh_from_db()
    assert connector.cursor == {}

    assert handover_set(connector, {0: 3}) is True
    assert handover_set(connector, {0: 1}) is False  # set once, never moved back
    Connector.objects.filter(pk=connector.pk).update(state="active")
    connector.refresh_from_db()
    assert discover(connector) == 2
    assert sorted(
        (a.extra["partition"], a.extra["start"], a.extra["end"])
        for a in Asset.objects.filter(connector=connector)
    ) == [(0, 3, 5), (1, 0, 2)]


# ---- errors ------------------------------------------------------------------------------------


def _create(role_users, config: dict, name: str = "bad-kafka"):
    return token_client(role_users["admin"]).post(
        "/api/v1/connectors/", {"name": name, "kind": "kafka", "config": config}, format="json"
    )


@on_worker
def test_bad_configs_are_400s_naming_the_field_and_create_nothing(kafka_broker, role_users):
    topic = kafka_broker.create_topic(partitions=2)
    _produce(kafka_broker, topic, {0: 3})
    good = {"bootstrap_servers": kafka_broker.bootstrap, "topic": topic}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    cases = [
        (
            {"bootstrap_servers": f"127.0.0.1:{closed_port}", "topic": topic, "timeout_seconds": 2},
            "config.bootstrap_servers",
            "no Kafka broker answered",
        ),
        ({**good, "topic": "no-such-topic"}, "config.topic", "does not exist"),
        ({**good, "start_from": {"0": 4}}, "config.start_from", "past the end"),
        ({**good, "start_from": {"7": 0}}, "config.start_from", "does not exist"),
        ({**good, "start_from": "newest"}, "config.start_from", "earliest"),
        ({**good, "slice_messages": 0}, "config.slice_messages", "integer"),
        ({**good, "sasl_password": "hunter2"}, "config", ""),
        ({**good, "handover": {"offset_column": "off"}}, "config.handover", "partition_column"),
    ]
    for config, field, reason in cases:
        response = _create(role_users, config)
        assert response.status_code == 400, (config, response.content)
        body = response.json()
        assert any(key.startswith(field) for key in body), (config, body)
        assert reason in str(body), (config, body)
    assert not Connector.objects.exists()
    # the unknown topic was looked up without being created (Tansu creates topics it is asked for)
    assert "no-such-topic" not in kafka_broker.admin().list_topics(timeout=5).topics

    assert _create(role_users, {**good, "start_from": {"0": 3}}, "good-kafka").status_code == 201
    connector = Connector.objects.get(name="good-kafka")
    with pytest.raises(InvalidInput) as refused:
        make_job(connector=connector, name="kafka-int", watermark_type="int")
    assert refused.value.field == "watermark_type" and "key_value" in refused.value.message


@on_worker
def test_a_recreated_topic_is_an_error_in_discovery_and_in_the_batch_losing_nothing(
    kafka_broker, celery_worker, role_users, tmp_path
):
    topic = kafka_broker.create_topic(partitions=1)
    _produce(kafka_broker, topic, {0: 5})
    connector = _connector(kafka_broker, topic, "kafka-recreated", read_timeout_seconds=5)
    assert discover(connector) == 1
    job = _job(connector, "kafka-recreated-copy", tmp_path / "sink", max_attempts=1)

    kafka_broker.delete_topic(topic)
    wait_until(
        lambda: topic not in kafka_broker.admin().list_topics(timeout=5).topics,
        timeout=10,
        message="the topic to be gone",
    )
    kafka_broker.create_topic_named(topic, partitions=1)
    _produce(kafka_broker, topic, {0: 2})

    response = token_client(role_users["admin"]).post(
        f"/api/v1/connectors/{connector.name}/discover/"
    )
    assert response.status_code == 400
    assert "before offset 5 that was already registered" in response.json()["config.topic"][0]
    connector.refresh_from_db()
    assert connector.cursor == {"0": 5} and connector.assets.count() == 1

    dispatch.job_run(job=job)
    batch = wait_until(
        lambda: Batch.objects.filter(job=job, status=BatchStatus.DEAD).first(),
        timeout=90,
        message="the batch over the vanished offsets to fail",
    )
    assert batch.error["type"] == "ReadError"
    assert "ends at offset 2, before the batch's end 5" in batch.error["message"]
    assert Watermark.objects.get(job=job).value is None
    assert not (tmp_path / "sink").exists() or read_sink(tmp_path / "sink") == []


def test_offsets_below_the_log_start_are_errors_never_skipped():
    # Tansu cannot delete records (DeleteRecords crashes it, memory storage has no retention),
    # so the broker's log start (the low watermark) is given here as the broker would report it.
    bounds = {0: (5, 20), 1: (0, 9)}
    assert below_log_start({0: (5, 8), 1: (0, 9)}, bounds) is None
    assert "offsets 3..4 were deleted" in below_log_start({0: (3, 8)}, bounds)
    config = {"topic": "orders"}
    with pytest.raises(InvalidInput) as lost:
        next_offsets({"0": 3, "1": 2}, config, bounds)
    assert lost.value.field == "cursor" and "partition 0: offsets 3..4" in lost.value.message
    with pytest.raises(InvalidInput) as lost:
        next_offsets({}, {**config, "start_from": {"0": 1}}, bounds)
    assert lost.value.field == "config.start_from"
    # a partition the cursor does not know starts at its earliest offset, not at 0
    assert next_offsets({"1": 2}, config, bounds) == {0: 5, 1: 2}


def test_slices_are_bounded_by_slice_messages_and_interleaved():
    assert plan_slices({0: 0, 1: 5}, {0: 5, 1: 7}, 2) == [
        (0, 0, 2),
        (1, 5, 7),
        (0, 2, 4),
        (0, 4, 5),
    ]
    assert plan_slices({0: 5}, {0: 5}, 2) == []


# ---- the reader ----------------------------------------------------------------------------------


@on_worker
def test_the_reader_reads_exactly_the_slices_with_sparks_kafka_columns(kafka_broker, spark):
    topic = kafka_broker.create_topic(partitions=2)
    _produce(kafka_broker, topic, {0: 8, 1: 4})
    source = {
        "kind": "kafka",
        "bootstrap_servers": kafka_broker.bootstrap,
        "topic": topic,
        "slices": [
            {"partition": 0, "start": 2, "end": 4},
            {"partition": 1, "start": 1, "end": 3},
            {"partition": 0, "start": 4, "end": 5},
        ],
        "read_timeout_seconds": 30,
    }
    df = read_kafka.read(spark, {"source": source})
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    rows = sorted((r.partition, r.offset, bytes(r.value), bytes(r.key)) for r in df.collect())
    assert rows == [
        (0, 2, b"m2", b"0:m2"),
        (0, 3, b"m3", b"0:m3"),
        (0, 4, b"m4", b"0:m4"),
        (1, 1, b"m1", b"1:m1"),
        (1, 2, b"m2", b"1:m2"),
    ]
    assert read_kafka.covered_watermark({"source": source}) == {"0": 5, "1": 3}

    gap = {**source, "slices": [{"partition": 0, "start": 0, "end": 2}, *source["slices"][1:2]]}
    gap["slices"].append({"partition": 0, "start": 3, "end": 4})
    with pytest.raises(ReadError, match="not contiguous"):
        read_kafka.read(spark, {"source": gap})


def test_the_spark_native_options_name_exactly_the_batchs_offsets():
    source = {
        "bootstrap_servers": "k1:9092",
        "topic": "orders",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username_env": "KAFKA_USER",
        "sasl_password_env": "KAFKA_PASS",
    }
    options = read_kafka.native_options(
        source, {0: (10, 20), 2: (0, 5)}, environ={"KAFKA_USER": "u", "KAFKA_PASS": "p w"}
    )
    assert options["assign"] == '{"orders": [0, 2]}'
    assert options["startingOffsets"] == '{"orders": {"0": 10, "2": 0}}'
    assert options["endingOffsets"] == '{"orders": {"0": 20, "2": 5}}'
    assert options["failOnDataLoss"] == "true"
    assert (
        'ScramLoginModule required username="u" password="p w";'
        in options["kafka.sasl.jaas.config"]
    )
    with pytest.raises(ReadError, match="KAFKA_PASS"):
        read_kafka.native_options(source, {0: (0, 1)}, environ={"KAFKA_USER": "u"})
