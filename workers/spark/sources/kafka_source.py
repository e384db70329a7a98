"""The executor side of a Kafka batch: one Spark partition per offset range, read by a consumer
assigned to exactly that range (no group, nothing committed to the broker).

The plan (built by `read_kafka.read` on the driver) is {"source": the topic's client settings with
credentials by variable name, "ranges": [[partition, start, end], ...], "timeout": seconds}. A
range `[start, end)` is consumed from `start` until the message at `end - 1` or any position at or
past `end` (a compacted or transactional tail has no message at `end - 1`); nothing past `end` is
kept. An offset the broker no longer has is an error (`auto.offset.reset: error`), never a jump.

A task borrows its consumer from the Python worker's pool (`kafka_consumers`: one per client
configuration, reused by the worker's later tasks, assigned afresh to each range, never committing)
and gathers each field of the messages with one C-level pass per poll (`map` over the Message
accessors), turning them into Arrow arrays once per record batch of `_BATCH_ROWS` rows (fewer once
the values reach `_BATCH_BYTES`).

pyarrow and confluent_kafka are imported where a range is read, not here: the driver's planner
processes (`create_data_source`, `plan_data_source_read`) import this module to unpickle the data
source and call only `schema()`, `reader()` and `partitions()`
(tests/spark/test_python_sources_imports.py).
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING

from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from workers.spark.errors import ReadError
from workers.spark.python_sources import note_read, plan_of

if TYPE_CHECKING:
    import pyarrow as pa

# Spark's own Kafka source's columns
SCHEMA = T.StructType(
    [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
    ]
)


@functools.cache
def arrow_schema() -> pa.Schema:
    """SCHEMA in Arrow's types, as the executors' record batches carry it."""
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestampType", pa.int32()),
        ]
    )


# messages asked of librdkafka per consume() call, and its longest wait (a range whose last
# offsets hold no message waits this long once for the broker's end-of-partition event)
_POLL_MESSAGES = 10_000
_POLL_SECONDS = 0.2
# an Arrow record batch handed to Spark: this many rows, or fewer once its values reach
# _BATCH_BYTES (large messages; the poll that reaches it is kept whole), or the range's last rows
_BATCH_ROWS = 32_768
_BATCH_BYTES = 16 * 1024 * 1024
# the executors' consumers: an offset the broker no longer has is an error, never a jump to
# another offset; the partition's end is reported (a range ending in a compacted or
# transactional gap has no message at end - 1)
_READ_SETTINGS = {
    "auto.offset.reset": "error",
    "enable.partition.eof": True,
    # a task reads one partition: librdkafka's default of 1 MB per partition and fetch request
    # makes that a broker round trip per ~1 MB
    "fetch.message.max.bytes": 16 * 1024 * 1024,
    # a consumer that reached its partition's end leaves a fetch at the broker that the broker
    # holds this long waiting for new records; the next task lent that consumer cannot fetch its
    # own range before that answer (librdkafka's default of 500 ms was 0.4-0.5 s of every such
    # task's start; docs/performance-notes.md). Below _POLL_SECONDS, so a range ending in a gap
    # still ends on the broker's end-of-partition event within one poll
    "fetch.wait.max.ms": 10,
    # once the consumer's prefetch queue holds queued.max.messages.kbytes (64 MB by default: 16 MB
    # fetches of a partition read as fast as it is consumed), librdkafka postpones the partition's
    # next fetch by this long; a task that drains the queue meanwhile waits out the rest (its
    # default of 1 s stalled a 128 MB task by 0.6-0.8 s in about half the reads of
    # bench_kafka_executors; docs/performance-notes.md)
    "fetch.queue.backoff.ms": 10,
}


class OffsetRange(InputPartition):
    def __init__(self, partition: int, start: int, end: int):
        super().__init__(None)
        self.partition, self.start, self.end = partition, start, end


class KafkaSource(DataSource):
    """Registered per credential set by `python_sources.load`; `secrets` = {variable: value}."""

    secrets: dict = {}

    @classmethod
    def name(cls) -> str:
        return "kafka"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return KafkaRangeReader(plan_of(self.options), self.secrets)


class KafkaRangeReader(DataSourceReader):
    def __init__(self, plan: dict, secrets: dict):
        self.plan = plan
        self.secrets = secrets

    def partitions(self):
        return [OffsetRange(*piece) for piece in self.plan["ranges"]]

    def read(self, partition: OffsetRange):
        from workers.spark.sources import kafka_consumers
        from workers.spark.sources.kafka_client import KafkaSourceError, consumer_config

        source = self.plan["source"]
        try:
            config = consumer_config(source, environ=self.secrets, **_READ_SETTINGS)
        except KafkaSourceError as exc:
            raise ReadError(f"{exc.field}: {exc.message}") from None
        rows = 0
        # reused across the tasks of this Python worker; closed if this read fails or stops early
        with kafka_consumers.lend(config) as consumer:
            for batch in _consume(consumer, source["topic"], partition, self.plan["timeout"]):
                rows += batch.num_rows
                yield batch
        note_read(
            f"kafka {source['topic']}/{partition.partition} [{partition.start}, {partition.end})",
            rows,
        )


def _consume(consumer, topic: str, piece: OffsetRange, timeout: float):
    """Record batches of exactly the messages of `piece`: each offset of `[start, end)` the broker
    holds, once, in order; nothing at or past `end`."""
    from confluent_kafka import KafkaError, Message, TopicPartition

    end = piece.end
    position = piece.start  # the next offset wanted
    consumer.assign([TopicPartition(topic, piece.partition, piece.start)])
    deadline = time.monotonic() + timeout
    columns = _Columns(topic, piece.partition)
    while True:
        if time.monotonic() > deadline:
            raise ReadError(
                f"topic {topic}: the batch's offsets were not all readable within {timeout:g} s "
                f"(partition {piece.partition} at offset {position} of {end}); the partition may "
                "have been truncated or the broker is unreachable"
            )
        # never more than the record batch has room for, nor than the offsets left in the range:
        # consume() waits for as many messages as it is asked for until its timeout, so asking
        # for more than the range holds would cost every task the whole timeout at its end
        wanted = min(_POLL_MESSAGES, _BATCH_ROWS - columns.rows, end - position)
        messages = consumer.consume(wanted, _POLL_SECONDS)
        done = False
        if messages and any(map(Message.error, messages)):
            kept = []
            for message in messages:
                error = message.error()
                if error is None:
                    kept.append(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    # the broker's end: enough only if it is at or past the range's end
                    done = done or message.offset() >= end
                else:
                    raise ReadError(f"topic {topic}, partition {piece.partition}: {error.str()}")
            messages = kept
        if messages:
            offsets = list(map(Message.offset, messages))
            if (
                offsets[0] < position
                or offsets[-1] >= end
                or any(p != piece.partition for p in set(map(Message.partition, messages)))
            ):
                # the range's end inside this poll (or, defensively, anything not of this range)
                done = done or offsets[-1] >= end
                pairs = [
                    (message, offset)
                    for message, offset in zip(messages, offsets, strict=True)
                    if position <= offset < end and message.partition() == piece.partition
                ]
                messages = [message for message, _offset in pairs]
                offsets = [offset for _message, offset in pairs]
            if messages:
                columns.add(messages, offsets)
                position = offsets[-1] + 1
                done = done or position >= end
        if columns.rows >= _BATCH_ROWS or columns.bytes >= _BATCH_BYTES or (done and columns.rows):
            yield columns.flush()
        if done:
            return


class _Columns:
    """The messages of one partition gathered as Python lists, one C-level pass per field
    (`map` over the Message accessors), turned into Arrow arrays once per record batch."""

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self._clear()

    def _clear(self):
        self.keys: list = []
        self.values: list = []
        self.offsets: list = []
        self.stamps: list = []
        self.rows = 0
        self.bytes = 0

    def add(self, messages: list, offsets: list) -> None:
        from confluent_kafka import Message

        values = list(map(Message.value, messages))
        self.values += values
        self.keys += map(Message.key, messages)
        self.offsets += offsets
        self.stamps += map(Message.timestamp, messages)
        self.rows += len(messages)
        self.bytes += sum(map(len, filter(None, values)))

    def flush(self) -> pa.RecordBatch:
        batch = _record_batch(
            self.topic, self.partition, self.keys, self.values, self.offsets, self.stamps
        )
        self._clear()
        return batch


def _record_batch(
    topic: str, partition: int, keys: list, values: list, offsets: list, stamps: list
) -> pa.RecordBatch:
    """One record batch in `arrow_schema()`; `stamps` are librdkafka's (type, milliseconds)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = len(offsets)
    kinds, millis = zip(*stamps, strict=True) if rows else ((), ())
    kinds = pa.array(kinds, pa.int32())
    # librdkafka: 0 not available, 1 CreateTime, 2 LogAppendTime -> Spark's 0 / 1, null if none
    missing = pc.equal(kinds, 0)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), rows),
            pa.repeat(pa.scalar(partition, pa.int32()), rows),
            pa.array(offsets, pa.int64()),
            pc.if_else(
                missing,
                pa.scalar(None, pa.int64()),
                pc.multiply(pa.array(millis, pa.int64()), 1000),
            ).cast(pa.timestamp("us", tz="UTC")),
            pc.if_else(missing, pa.scalar(None, pa.int32()), pc.subtract(kinds, 1)),
        ],
        schema=arrow_schema(),
    )
