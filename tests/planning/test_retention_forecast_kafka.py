"""The retention-breach forecast of a deliberately slow job on a real Kafka topic (Tansu).

Tansu (0.6, memory storage) takes and reports a topic's `retention.ms` but does not enforce it
(its log start stays at 0 however old the messages get) and drops the connection on DeleteRecords,
so nothing on this broker moves the log start. The loss is therefore observed as the moment the
job's next message turns older than the topic's retention.ms by the broker's own timestamp of
that message: when a broker that enforces retention.ms deletes it. The forecast, made at the start
from the broker's metadata and the job's committed offsets alone, is compared with that moment.
"""

import threading
import time

import pytest
from django.test import override_settings

from inventory.models import Asset, Job, RetentionForecast
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from inventory.services.retention_forecast import retention_forecast_refresh
from inventory.sources.kafka import discover
from inventory.sources.kafka import retention as kafka_retention
from tests.support.api_support import token_client
from tests.support.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)

RETENTION_MS = 20_000
WRITES_PER_SECOND = 40
SLICE = 5  # messages a batch reads
READ_EVERY = 0.25  # seconds between the slow job's batches: 20 messages a second


class SteadyProducer(threading.Thread):
    """One message per produce call at WRITES_PER_SECOND until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()

    def run(self):
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        start, n = time.time(), 0
        while not self.stop.is_set():
            producer.produce(self.topic, value=b"m%d" % n, partition=0)
            producer.flush(10)
            n += 1
            pause = start + n / WRITES_PER_SECOND - time.time()
            if pause > 0:
                time.sleep(pause)


def _write_time(bootstrap: str, topic: str, offset: int) -> float:
    """The broker's timestamp of one message (the test reads it; the forecast never does)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        message = consumer.poll(10)
        assert message is not None and message.error() is None and message.offset() == offset
        return message.timestamp()[1] / 1000
    finally:
        consumer.close()


def _read_one_batch(job: Job) -> int | None:
    """The slow job's step: register what is new, take one batch, commit it with its offsets."""
    discover(job.connector)
    batch = lifecycle.batch_acquire(job=job, worker="slow-reader")
    if batch is None:
        return None
    ends = [int(location.rsplit("-", 1)[1]) for location in _locations(batch)]
    lifecycle.batch_succeed(
        batch_id=batch.pk, attempt=batch.attempt, watermark_value={"0": max(ends)}
    )
    return max(ends)


def _locations(batch) -> list[str]:
    from inventory.models import Asset

    return list(
        Asset.objects.filter(
            connector=batch.job.connector, id__gte=batch.span.lower, id__lt=batch.span.upper
        ).values_list("location", flat=True)
    )


@override_settings(METRICS_CACHE_SECONDS=0, RETENTION_WARN_SECONDS=3600)
def test_the_forecast_of_a_slow_job_matches_when_retention_overtakes_it(
    kafka_broker, role_users, client, tmp_path
):
    from confluent_kafka.admin import NewTopic

    topic = "retained-fast"
    admin = kafka_broker.admin()
    created = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"retention.ms": str(RETENTION_MS)})]
    )
    for future in created.values():
        future.result(timeout=10)
    producer = SteadyProducer(kafka_broker.bootstrap, topic)
    producer.start()
    try:
        time.sleep(8)  # a backlog: the job starts 8 s behind
        connector = connector_create(
            name="retained",
            kind="kafka",
            config={
                "bootstrap_servers": kafka_broker.bootstrap,
                "topic": topic,
                "slice_messages": SLICE,
            },
        )
        job = make_job(
            connector=connector,
            name="slow-reader",
            watermark_type="key_value",
            batch_weight=SLICE,
            max_items=1,
            sink={"kind": "files", "path": str(tmp_path / "sink")},
        )
        # the slow job reads for a while, so that its rate is known
        needed, warm_until = 0, time.time() + 6
        while time.time() < warm_until:
            _write_time(kafka_broker.bootstrap, topic, needed)  # as each step below does
            time.sleep(READ_EVERY)
            needed = _read_one_batch(job) or needed

        started = time.time()
        forecast = retention_forecast_refresh(job=job)
        assert forecast.verdict == "at_risk", forecast.inputs
        predicted = forecast.margin_seconds
        stream = forecast.inputs["streams"][0]
        assert stream["retention_ms"] == RETENTION_MS
        assert stream["log_start_offset"] == 0  # Tansu keeps everything
        # measured, not assumed: a busy machine produces and reads slower than asked
        assert 0 < stream["read_per_second"] < stream["written_per_second"] <= WRITES_PER_SECOND

        # the job goes on at its pace: when does the message it needs get older than retention?
        lost_at = None
        needed = int(job.watermark.__class__.objects.get(job=job).value["0"])
        deadline = started + 3 * predicted + 30
        while lost_at is None and time.time() < deadline:
            expires = _write_time(kafka_broker.bootstrap, topic, needed) + RETENTION_MS / 1000
            step_end = time.time() + READ_EVERY
            if expires <= step_end:
                lost_at = max(expires, started)
                break
            time.sleep(max(step_end - time.time(), 0))
            needed = _read_one_batch(job) or needed
    finally:
        producer.stop.set()
        producer.join(10)
    assert lost_at is not None, "the slow job never fell out of the retention"
    actual = lost_at - started
    assert predicted == pytest.approx(actual, rel=0.2), (predicted, actual, forecast.inputs)
    assert RetentionForecast.objects.get(job=job).verdict == "at_risk"

    # what a user sees: the job page, the API and CLI's job detail, /metrics, the alert strip
    client.force_login(role_users["viewer"])
    page = client.get(f"/jobs/{job.name}/").content.decode()
    assert "at current rates this job starts losing data in ~" in page
    assert 'id="retention"' in page and "retention_ms 20000" in page
    detail = token_client(role_users["viewer"]).get(f"/api/v1/jobs/{job.name}/").json()
    assert detail["retention_forecast"]["verdict"] == "at_risk"
    assert detail["retention_forecast"]["margin_seconds"] == pytest.approx(predicted)
    metrics = token_client(role_users["viewer"]).get("/metrics").content.decode()
    assert f'tidemark_retention_margin_seconds{{job="{job.name}"}} ' in metrics
    overview = client.get("/").content.decode()
    assert 'data-kind="retention_breach"' in overview and "Retention" in overview


def test_the_probe_reads_a_topics_size_limit_and_the_size_of_its_messages_from_the_broker(
    kafka_broker, role_users, client
):
    """`retention.bytes` as the broker reports it, and the messages' size as they are stored,
    give each partition a size stream beside its time stream. Tansu (0.6) reports the setting
    but does not enforce it either (the log start stays at 0 however large the log), so the
    check is against the broker's own settings, offsets and messages; the loss it forecasts is
    the arithmetic's (tests/planning/test_retention_model.py simulates it)."""
    from confluent_kafka.admin import NewTopic

    topic, limit = "sized", 20_000
    admin = kafka_broker.admin()
    created = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"retention.bytes": str(limit), "retention.ms": "3600000"})]
    )
    for future in created.values():
        future.result(timeout=10)
    value = b"v" * 90
    kafka_broker.produce(topic, [(0, value)] * 200)  # key b"0:" + value: 182 bytes a message
    connector = connector_create(
        name="sized",
        kind="kafka",
        config={"bootstrap_servers": kafka_broker.bootstrap, "topic": topic, "slice_messages": 50},
    )
    discover(connector)
    slices = {a.extra["start"]: a for a in Asset.objects.filter(connector=connector)}
    assert sorted(slices) == [0, 50, 100, 150]

    far = make_job(connector=connector, name="far-behind", watermark_type="key_value")
    forecast = retention_forecast_refresh(job=far)
    by_time, by_size = forecast.inputs["streams"]
    assert (by_time["name"], by_time["rule"], by_time["retention_ms"]) == (
        "partition 0",
        "retention.ms",
        3_600_000,
    )
    assert (by_size["name"], by_size["rule"]) == ("partition 0 by size", "retention.bytes")
    assert by_size["retention_bytes"] == limit
    message = len(b"0:" + value) + len(value) + kafka_retention.RECORD_OVERHEAD_BYTES
    assert by_size["message_bytes"] == message
    assert (by_size["log_start_offset"], by_size["end_offset"]) == (0, 200)  # nothing deleted
    assert by_size["log_bytes"] == 200 * message
    assert by_size["limit_messages"] == pytest.approx(limit / message, abs=0.1)
    # offset 0 has more than the limit's worth of messages after it: a broker that enforces
    # retention.bytes has deleted it already
    assert (forecast.verdict, forecast.margin_seconds) == ("at_risk", 0.0)
    assert forecast.message.endswith("(partition 0 by size first)")

    near = make_job(
        connector=connector,
        name="near-head",
        watermark_type="key_value",
        start_position=slices[150].pk,
    )
    forecast = retention_forecast_refresh(job=near)
    by_time, by_size = forecast.inputs["streams"]
    assert by_size["needed_offset"] == 150 and by_size["bytes_ahead"] == 50 * message
    # lost once the limit's worth of messages follow offset 150, at the measured write rate
    rate = by_size["written_per_second"]
    assert rate > 0 and by_size["written_bytes_per_second"] == pytest.approx(rate * message, 0.01)
    expected = (150 + limit / message - 200) / rate
    assert forecast.verdict == "at_risk"
    assert forecast.margin_seconds == pytest.approx(expected, rel=0.01)
    assert by_size["margin_seconds"] < by_time["margin_seconds"]

    # the job page and the API show both streams with their inputs
    client.force_login(role_users["viewer"])
    page = client.get(f"/jobs/{near.name}/").content.decode()
    assert "partition 0 by size" in page and f"retention_bytes {limit}" in page
    assert f"message_bytes {float(message)}" in page and "rule retention.ms" in page
    detail = token_client(role_users["viewer"]).get(f"/api/v1/jobs/{near.name}/").json()
    shown = detail["retention_forecast"]["inputs"]["streams"]
    assert [s["name"] for s in shown] == ["partition 0", "partition 0 by size"]
    assert shown[1]["log_bytes"] == 200 * message
