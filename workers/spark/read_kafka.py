"""The worker's reader for Kafka batches: the batch's offset slices, exactly, as a DataFrame.

A spec's `source` is {"kind": "kafka", "bootstrap_servers", "topic", "slices": [{"partition",
"start", "end"}, ...], "read_timeout_seconds", optional SASL env-var names, "spark_native"}. The
slices of one partition in a batch are contiguous (a batch is a contiguous id range and each
partition's slices are registered in offset order), so each partition is read as one range
`[start, end)`: assigned at `start`, consumed until the message at `end - 1` (or a position at or
past `end`), and nothing past `end` is kept, whatever the broker reports as the partition's end.

The columns are those of Spark's Kafka source: key, value (binary), topic, partition, offset,
timestamp, timestampType. With `spark_native: true` Spark's own Kafka batch source reads the same
ranges (the cluster needs the spark-sql-kafka package).
"""

import json
import os
import time

import pyarrow as pa
from confluent_kafka import KafkaError, TopicPartition
from pyspark.sql import DataFrame, SparkSession

from workers.spark.errors import ReadError
from workers.spark.kafka_client import (
    DEFAULT_TIMEOUT_SECONDS,
    KafkaSourceError,
    below_log_start,
    client_config,
    open_consumer,
    partition_bounds,
)

SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
# librdkafka's timestamp types -> Spark's timestampType (0 CreateTime, 1 LogAppendTime)
_TIMESTAMP_TYPES = {1: 0, 2: 1}
_POLL_MESSAGES = 10_000


def slice_ranges(source: dict) -> dict[int, tuple[int, int]]:
    """{partition: (start, end)} of the spec's slices; ReadError if a partition's are not one
    contiguous run (the spec would skip or repeat offsets)."""
    slices = source.get("slices")
    if not isinstance(slices, list) or not slices:
        raise ReadError("kafka spec: 'slices' must be a non-empty list")
    ranges: dict[int, tuple[int, int]] = {}
    for piece in sorted(slices, key=lambda s: (s["partition"], s["start"])):
        partition, start, end = int(piece["partition"]), int(piece["start"]), int(piece["end"])
        if not 0 <= start < end:
            raise ReadError(f"kafka spec: partition {partition} slice [{start}, {end}) is empty")
        if partition in ranges:
            low, high = ranges[partition]
            if start != high:
                raise ReadError(
                    f"kafka spec: partition {partition} slices are not contiguous "
                    f"({low}-{high} then {start}-{end})"
                )
            ranges[partition] = (low, end)
        else:
            ranges[partition] = (start, end)
    return ranges


def covered_watermark(spec: dict) -> dict[str, int]:
    """What the batch covered: the next offset of each partition it read."""
    return {str(p): end for p, (_start, end) in slice_ranges(spec["source"]).items()}


def read(spark: SparkSession, spec: dict) -> DataFrame:
    source = spec["source"]
    ranges = slice_ranges(source)
    if source.get("spark_native"):
        return spark.read.format("kafka").options(**native_options(source, ranges)).load()
    timeout = float(source.get("read_timeout_seconds") or 300)
    table = consume_ranges(source, ranges, timeout=timeout)
    return spark.createDataFrame(table)


def consume_ranges(source: dict, ranges: dict[int, tuple[int, int]], *, timeout: float) -> pa.Table:
    """Exactly the messages of `ranges` ({partition: (start, end)}) of the source's topic."""
    topic = source["topic"]
    try:
        consumer = open_consumer(
            source,
            # an offset the broker no longer has is an error, never a jump to another offset
            **{"auto.offset.reset": "error", "enable.partition.eof": True},
        )
    except KafkaSourceError as exc:
        raise ReadError(f"{exc.field}: {exc.message}") from None
    try:
        try:
            bounds = partition_bounds(
                consumer, topic, sorted(ranges), timeout=min(timeout, DEFAULT_TIMEOUT_SECONDS)
            )
        except KafkaSourceError as exc:
            raise ReadError(exc.message) from None
        lost = below_log_start(ranges, bounds)
        if lost:
            raise ReadError(f"topic {topic}, {lost}")
        for partition, (_start, end) in sorted(ranges.items()):
            high = bounds[partition][1]
            if high < end:
                # the end a discovery saw never moves back in a healthy partition
                raise ReadError(
                    f"topic {topic}, partition {partition} ends at offset {high}, before the "
                    f"batch's end {end}: the topic was recreated or truncated"
                )
        return _consume(consumer, topic, ranges, timeout)
    finally:
        consumer.close()


def _consume(consumer, topic: str, ranges: dict, timeout: float) -> pa.Table:
    kept: list = []
    pending = {partition: end for partition, (_start, end) in ranges.items()}
    position = {partition: start for partition, (start, _end) in ranges.items()}
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _end) in ranges.items()])
    deadline = time.monotonic() + timeout

    def finish(partition: int) -> None:
        del pending[partition]
        consumer.pause([TopicPartition(topic, partition)])

    while pending:
        if time.monotonic() > deadline:
            behind = ", ".join(
                f"partition {p} at offset {position[p]} of {end}"
                for p, end in sorted(pending.items())
            )
            raise ReadError(
                f"topic {topic}: the batch's offsets were not all readable within {timeout:g} s "
                f"({behind}); the partition may have been truncated or the broker is unreachable"
            )
        for message in consumer.consume(_POLL_MESSAGES, 0.5):
            partition = message.partition()
            end = pending.get(partition)
            if end is None:
                continue  # fetched before the partition was paused, or past its slice
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # the broker's end: enough only if it is at or past the slice's end (a
                    # compacted or transactional tail has no message at end - 1)
                    if message.offset() >= end:
                        finish(partition)
                    continue
                raise ReadError(f"topic {topic}, partition {partition}: {error.str()}")
            offset = message.offset()
            if offset >= end:
                finish(partition)
                continue
            kept.append(message)
            position[partition] = offset + 1
            if offset >= end - 1:
                finish(partition)
    return _table(topic, kept)


def _table(topic: str, messages: list) -> pa.Table:
    stamps = [message.timestamp() for message in messages]
    return pa.Table.from_arrays(
        [
            pa.array([message.key() for message in messages], pa.binary()),
            pa.array([message.value() for message in messages], pa.binary()),
            pa.array([topic] * len(messages), pa.string()),
            pa.array([message.partition() for message in messages], pa.int32()),
            pa.array([message.offset() for message in messages], pa.int64()),
            pa.array(
                [stamp if kind in _TIMESTAMP_TYPES else None for kind, stamp in stamps], pa.int64()
            ).cast(pa.timestamp("ms", tz="UTC")),
            pa.array([_TIMESTAMP_TYPES.get(kind) for kind, _stamp in stamps], pa.int32()),
        ],
        schema=SCHEMA,
    )


def native_options(source: dict, ranges: dict[int, tuple[int, int]], *, environ=None) -> dict:
    """Options of Spark's Kafka batch source for exactly these ranges; `failOnDataLoss` makes an
    offset below the log start an error there too."""
    topic = source["topic"]
    options = {
        "kafka.bootstrap.servers": source["bootstrap_servers"],
        "assign": json.dumps({topic: sorted(ranges)}),
        "startingOffsets": json.dumps(
            {topic: {str(p): s for p, (s, _e) in sorted(ranges.items())}}
        ),
        "endingOffsets": json.dumps({topic: {str(p): e for p, (_s, e) in sorted(ranges.items())}}),
        "failOnDataLoss": "true",
    }
    protocol = source.get("security_protocol")
    if protocol:
        options["kafka.security.protocol"] = protocol
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        try:
            settings = client_config(source, environ=os.environ if environ is None else environ)
        except KafkaSourceError as exc:
            raise ReadError(f"{exc.field}: {exc.message}") from None
        mechanism = settings["sasl.mechanism"]
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required "
            f"username={json.dumps(settings['sasl.username'])} "
            f"password={json.dumps(settings['sasl.password'])};"
        )
    return options
