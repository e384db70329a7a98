"""The executor side of a Kafka batch: one Spark partition per offset range, read by a consumer
assigned to exactly that range (no group, nothing committed to the broker).

The plan (built by `read_kafka.read` on the driver) is {"source": the topic's client settings with
credentials by variable name, "ranges": [[partition, start, end], ...], "timeout": seconds}. A
range `[start, end)` is consumed from `start` until the message at `end - 1` or any position at or
past `end` (a compacted or transactional tail has no message at `end - 1`); nothing past `end` is
kept. An offset the broker no longer has is an error (`auto.offset.reset: error`), never a jump.

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


# librdkafka's timestamp types -> Spark's timestampType (0 CreateTime, 1 LogAppendTime)
_TIMESTAMP_TYPES = {1: 0, 2: 1}
_POLL_MESSAGES = 10_000
_BATCH_ROWS = 10_000


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
        from workers.spark.sources.kafka_client import KafkaSourceError, open_consumer

        source = self.plan["source"]
        try:
            consumer = open_consumer(
                source,
                environ=self.secrets,
                # an offset the broker no longer has is an error, never a jump to another offset
                **{"auto.offset.reset": "error", "enable.partition.eof": True},
            )
        except KafkaSourceError as exc:
            raise ReadError(f"{exc.field}: {exc.message}") from None
        rows = 0
        try:
            for batch in _consume(consumer, source["topic"], partition, self.plan["timeout"]):
                rows += batch.num_rows
                yield batch
        finally:
            consumer.close()
        note_read(
            f"kafka {source['topic']}/{partition.partition} [{partition.start}, {partition.end})",
            rows,
        )


def _consume(consumer, topic: str, piece: OffsetRange, timeout: float):
    """Record batches of exactly the messages of `piece`."""
    from confluent_kafka import KafkaError, TopicPartition

    end = piece.end
    position = piece.start
    consumer.assign([TopicPartition(topic, piece.partition, piece.start)])
    deadline = time.monotonic() + timeout
    kept: list = []
    while True:
        if time.monotonic() > deadline:
            raise ReadError(
                f"topic {topic}: the batch's offsets were not all readable within {timeout:g} s "
                f"(partition {piece.partition} at offset {position} of {end}); the partition may "
                "have been truncated or the broker is unreachable"
            )
        done = False
        for message in consumer.consume(_POLL_MESSAGES, 0.5):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # the broker's end: enough only if it is at or past the range's end
                    done = done or message.offset() >= end
                    continue
                raise ReadError(f"topic {topic}, partition {piece.partition}: {error.str()}")
            offset = message.offset()
            if offset >= end:
                done = True
                break
            kept.append(message)
            position = offset + 1
            if offset >= end - 1:
                done = True
                break
        if len(kept) >= _BATCH_ROWS or (done and kept):
            yield _record_batch(topic, kept)
            kept = []
        if done:
            return


def _record_batch(topic: str, messages: list) -> pa.RecordBatch:
    import pyarrow as pa

    stamps = [message.timestamp() for message in messages]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([message.key() for message in messages], pa.binary()),
            pa.array([message.value() for message in messages], pa.binary()),
            pa.array([topic] * len(messages), pa.string()),
            pa.array([message.partition() for message in messages], pa.int32()),
            pa.array([message.offset() for message in messages], pa.int64()),
            pa.array(
                [stamp * 1000 if kind in _TIMESTAMP_TYPES else None for kind, stamp in stamps],
                pa.int64(),
            ).cast(pa.timestamp("us", tz="UTC")),
            pa.array([_TIMESTAMP_TYPES.get(kind) for kind, _stamp in stamps], pa.int32()),
        ],
        schema=arrow_schema(),
    )
