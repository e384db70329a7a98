"""What a Kafka topic's retention will take from a job, read from the broker.

The topic's `retention.ms` / `retention.bytes` / `cleanup.policy` (DescribeConfigs), each
partition's log start and end offsets, and when its offsets were written: the broker's time index
answers "the first offset written at or after T" (ListOffsets by timestamp) for a few times across
the retention window. Against them: the offset the job still needs in each partition (the first
registered slice it has not committed, or that an open backfill or restatement still has to read)
and its recent read rate there (services/retention_forecast.py).

Each rule is a stream of its own per partition, and the forecast takes the first loss of all:
- `retention.ms`: an offset is deleted that long after it was written ("partition N");
- `retention.bytes` (per partition): the oldest offsets are deleted while the rest of the log
  still holds that many bytes ("partition N by size"). Message sizes are not metadata: the last
  SIZE_SAMPLE messages of the partition are read (at most SIZE_SAMPLE_BYTES each fetch) for their
  average size, key, value and headers plus RECORD_OVERHEAD_BYTES; the limit is then a count of
  messages (limit / average), the log's size (end - start offsets) x average, its growth the
  write rate x average. A producer's batch headers (61 bytes a batch) are not counted: with small
  messages produced one at a time the real log is larger and the broker deletes sooner; a
  compressed topic stores less than the messages' sizes, and the broker deletes later.
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
SIZE_SAMPLE = 32  # messages read per partition for their average size (retention.bytes only)
SIZE_SAMPLE_BYTES = 1 << 20  # fetched per partition at most while sampling
SIZE_SAMPLE_SECONDS = 5.0  # sampling stops with what it has past this
RECORD_OVERHEAD_BYTES = 10  # a record's own framing in a v2 batch (lengths, deltas, attributes)


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


def message_bytes(
    config: dict, topic: str, bounds: dict[int, tuple[int, int]], *, timeout: float
) -> dict[int, float | None]:
    """{partition: average bytes of its last SIZE_SAMPLE messages, None with none read}."""
    starts = {p: max(low, high - SIZE_SAMPLE) for p, (low, high) in bounds.items() if high > low}
    sizes: dict[int, list[int]] = {p: [] for p in bounds}
    if not starts:
        return dict.fromkeys(bounds)
    consumer = open_consumer(
        config,
        **{"max.partition.fetch.bytes": SIZE_SAMPLE_BYTES, "fetch.max.bytes": SIZE_SAMPLE_BYTES},
    )
    try:
        consumer.assign([TopicPartition(topic, p, start) for p, start in starts.items()])
        deadline = time.monotonic() + min(SIZE_SAMPLE_SECONDS, timeout)
        wanted = {p: bounds[p][1] - start for p, start in starts.items()}
        while time.monotonic() < deadline and any(len(sizes[p]) < n for p, n in wanted.items()):
            for message in consumer.consume(SIZE_SAMPLE, timeout=0.5):
                if message.error() is not None:
                    continue
                part = message.partition()
                if part in wanted and len(sizes[part]) < wanted[part]:
                    headers = message.headers() or []
                    sizes[part].append(
                        len(message.key() or b"")
                        + len(message.value() or b"")
                        + sum(len(k) + len(v or b"") for k, v in headers)
                        + RECORD_OVERHEAD_BYTES
                    )
    except KafkaException as exc:
        raise KafkaSourceError(
            "config.bootstrap_servers", f"cannot read messages of {topic} for their size: {exc}"
        ) from None
    finally:
        consumer.close()
    return {p: (sum(found) / len(found) if found else None) for p, found in sizes.items()}


def partition_streams(
    *,
    partition: int,
    timeline: model.Timeline,
    reader: model.Reader,
    low: int,
    retention_seconds: float | None,
    retention_bytes: int | None,
    average_bytes: float | None,
    inputs: dict,
) -> list:
    """The streams of one partition: one per retention rule that applies (see the module's
    docstring); the bytes rule needs an average message size."""
    streams = []
    if retention_seconds is not None:
        streams.append(
            (
                f"partition {partition}",
                timeline,
                model.Retention(seconds=retention_seconds),
                reader,
                low,
                {**inputs, "rule": "retention.ms"},
            )
        )
    if retention_bytes is not None:
        sized = {**inputs, "rule": "retention.bytes", "retention_bytes": retention_bytes}
        if not average_bytes:
            sized["note"] = "no message to measure: retention.bytes is not forecast yet"
            retention = model.Retention()  # deletes nothing the forecast can place
        else:
            retention = model.Retention(positions=retention_bytes / average_bytes)
            sized.update(
                message_bytes=round(average_bytes, 1),
                log_bytes=round((timeline.head - low) * average_bytes),
                bytes_ahead=round(max(timeline.head - reader.position, 0) * average_bytes),
                written_bytes_per_second=round(timeline.rate * average_bytes, 1),
                limit_messages=round(retention_bytes / average_bytes, 1),
            )
        streams.append((f"partition {partition} by size", timeline, retention, reader, low, sized))
    return streams


def probe(*, connector: Connector, needed_id: int, rates: dict, now: float) -> list:
    """Per partition one stream per retention rule: (name, timeline, retention, reader, first
    offset, inputs)."""
    config = connector.config or {}
    confine(config)
    timeout = min(_timeout(config), 10.0)
    try:
        settings = topic_retention(config, timeout=timeout)
        policy = settings.get("cleanup.policy") or "delete"
        retention_ms = int(settings.get("retention.ms") or KAFKA_DEFAULT_RETENTION_MS)
        size_limit = int(settings.get("retention.bytes") or -1)
        by_time = retention_ms >= 0
        by_size = size_limit >= 0
        if "delete" not in policy or not (by_time or by_size):
            return []  # compacted only, or kept forever: retention never deletes what a job needs
        retention = retention_ms / 1000 if by_time else None
        span = retention if by_time else RATE_WINDOW_SECONDS
        consumer = open_consumer(config)
        try:
            partitions = topic_partitions(consumer, config["topic"], timeout=timeout)
            bounds = partition_bounds(consumer, config["topic"], partitions, timeout=timeout)
            points = write_points(
                consumer,
                config["topic"],
                partitions,
                since=now - span,
                now=now,
                timeout=timeout,
            )
        finally:
            consumer.close()
        sizes = (
            message_bytes(config, config["topic"], bounds, timeout=timeout)
            if by_size
            else dict.fromkeys(partitions)
        )
    except KafkaSourceError as exc:
        raise InvalidInput(exc.field, exc.message) from None
    streams = []
    window = min(RATE_WINDOW_SECONDS, span)
    shared = {"retention_ms": retention_ms, "cleanup_policy": policy}
    for partition in partitions:
        low, high = bounds[partition]
        written = [(o, t) for o, t in points[partition] if o < high]
        recent = [(o, t) for o, t in written if t >= now - window]
        write_rate = (high - recent[0][0]) / window if recent else 0.0
        needed = _needed_offset(connector, partition, needed_id, low)
        read_rate = float(rates.get(str(partition), 0.0))
        streams += partition_streams(
            partition=partition,
            timeline=model.Timeline(points=tuple(written), head=high, now=now, rate=write_rate),
            reader=model.Reader(needed, read_rate),
            low=low,
            retention_seconds=retention,
            retention_bytes=size_limit if by_size else None,
            average_bytes=sizes.get(partition),
            inputs={
                "partition": partition,
                "log_start_offset": low,
                "end_offset": high,
                "needed_offset": needed,
                "read_per_second": round(read_rate, 3),
                "written_per_second": round(write_rate, 3),
                **shared,
            },
        )
    return streams
