"""What a Kafka topic's retention will take from a job, read from the broker's metadata only.

The topic's `retention.ms` / `retention.bytes` / `cleanup.policy` (DescribeConfigs), each
partition's log start and end offsets, and when its offsets were written: the broker's time index
answers "the first offset written at or after T" (ListOffsets by timestamp) for a few times across
the retention window, so no message is read. Against them: the offset the job still needs in each
partition (the first registered slice it has not committed, or that an open backfill or
restatement still has to read) and its recent read rate there (services/retention_forecast.py).
"""

import time

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from inventory.models import Asset, Connector
from inventory.services import retention_model as model
from inventory.services.errors import InvalidInput
from inventory.sources.kafka import _timeout, confine
from workers.spark.sources.kafka_client import (
    KafkaSourceError,
    client_config,
    open_consumer,
    partition_bounds,
    topic_partitions,
)

TIMELINE_POINTS = 48  # times asked across the retention window, per partition
RATE_WINDOW_SECONDS = 300.0  # the write rate is the last five minutes' (or the retention's)
KAFKA_DEFAULT_RETENTION_MS = 7 * 86_400 * 1000  # the broker's default when the topic sets none
PROBE_SECONDS = 30.0  # a job's look at the broker stops with an error past this


def topic_retention(config: dict, *, timeout: float) -> dict:
    """The topic's retention settings as the broker reports them."""
    admin = AdminClient(client_config(config))
    resource = ConfigResource(ConfigResource.Type.TOPIC, config["topic"])
    try:
        found = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout=timeout
        )
    except KafkaException as exc:
        raise KafkaSourceError(
            "config.topic", f"cannot read the configuration of topic {config['topic']}: {exc}"
        ) from None
    wanted = ("retention.ms", "retention.bytes", "cleanup.policy")
    return {name: found[name].value for name in wanted if name in found}


def write_points(
    consumer, topic: str, partitions: list[int], *, since: float, now: float, timeout: float
) -> dict[int, list[tuple[int, float]]]:
    """{partition: [(offset, time)]}: the first offset written at or after each time asked, so
    that offset was written at that time or later (the later of the times that name it kept)."""
    points: dict[int, dict[int, float]] = {partition: {} for partition in partitions}
    step = (now - since) / (TIMELINE_POINTS - 1)
    deadline = time.monotonic() + PROBE_SECONDS
    for index in range(TIMELINE_POINTS):
        if time.monotonic() > deadline:
            raise KafkaSourceError(
                "config.bootstrap_servers",
                f"the broker took over {PROBE_SECONDS:g} s to answer the offsets of {topic} by time",
            )
        moment = since + index * step
        asked = [TopicPartition(topic, p, int(moment * 1000)) for p in partitions]
        try:
            answered = consumer.offsets_for_times(asked, timeout=timeout)
        except KafkaException as exc:
            raise KafkaSourceError(
                "config.bootstrap_servers", f"cannot look up offsets by time in {topic}: {exc}"
            ) from None
        for found in answered:
            if found.error is None and found.offset >= 0:
                known = points[found.partition]
                known[found.offset] = max(known.get(found.offset, moment), moment)
    return {p: sorted(found.items()) for p, found in points.items()}


def _needed_offset(connector: Connector, partition: int, needed_id: int, fallback: int) -> int:
    """The start of the first slice of `partition` at or after asset id `needed_id`, else the
    offset discovery registers next there (the job will need it too)."""
    extra = (
        Asset.objects.filter(connector=connector, id__gte=needed_id, extra__partition=partition)
        .order_by("id")
        .values_list("extra", flat=True)
        .first()
    )
    if extra is not None:
        return int(extra["start"])
    return int((connector.cursor or {}).get(str(partition), fallback))


def probe(*, connector: Connector, needed_id: int, rates: dict, now: float) -> list:
    """One stream per partition: (name, timeline, retention, reader, first offset, inputs)."""
    config = connector.config or {}
    confine(config)
    timeout = min(_timeout(config), 10.0)
    try:
        settings = topic_retention(config, timeout=timeout)
        policy = settings.get("cleanup.policy") or "delete"
        retention_ms = int(settings.get("retention.ms") or KAFKA_DEFAULT_RETENTION_MS)
        if "delete" not in policy or retention_ms < 0:
            return []  # compacted only, or kept forever: time never deletes what a job needs
        retention = retention_ms / 1000
        consumer = open_consumer(config)
        try:
            partitions = topic_partitions(consumer, config["topic"], timeout=timeout)
            bounds = partition_bounds(consumer, config["topic"], partitions, timeout=timeout)
            points = write_points(
                consumer,
                config["topic"],
                partitions,
                since=now - retention,
                now=now,
                timeout=timeout,
            )
        finally:
            consumer.close()
    except KafkaSourceError as exc:
        raise InvalidInput(exc.field, exc.message) from None
    streams = []
    window = min(RATE_WINDOW_SECONDS, retention)
    for partition in partitions:
        low, high = bounds[partition]
        written = [(o, t) for o, t in points[partition] if o < high]
        recent = [(o, t) for o, t in written if t >= now - window]
        write_rate = (high - recent[0][0]) / window if recent else 0.0
        needed = _needed_offset(connector, partition, needed_id, low)
        read_rate = float(rates.get(str(partition), 0.0))
        timeline = model.Timeline(points=tuple(written), head=high, now=now, rate=write_rate)
        streams.append(
            (
                f"partition {partition}",
                timeline,
                model.Retention(seconds=retention),
                model.Reader(needed, read_rate),
                low,
                {
                    "partition": partition,
                    "log_start_offset": low,
                    "end_offset": high,
                    "needed_offset": needed,
                    "read_per_second": round(read_rate, 3),
                    "written_per_second": round(write_rate, 3),
                },
            )
        )
    shared = {"retention_ms": retention_ms, "cleanup_policy": policy}
    if settings.get("retention.bytes") not in (None, "-1"):
        shared["retention_bytes"] = int(settings["retention.bytes"])
        shared["note"] = "retention.bytes is shown, not modelled: message sizes are not metadata"
    return [(*stream[:-1], {**stream[-1], **shared}) for stream in streams]
