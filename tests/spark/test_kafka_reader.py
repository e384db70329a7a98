"""The executors' Kafka reader with consumers reused per Python worker process, against a real
broker (Tansu): tasks of one worker reading different ranges one after another share a consumer and
each gets exactly its offsets; a task that fails or stops early never hands its consumer on; a range
whose last offsets hold no message (a transaction's commit marker, as after compaction) ends at
the broker's end; the Arrow batches carry Spark's Kafka columns and are cut by rows and bytes.

The reader's `read` is called in this process, as a Python worker calls it for each task.
"""

import pyarrow as pa
import pytest

from workers.spark.errors import ReadError
from workers.spark.sources import kafka_consumers, kafka_source
from workers.spark.sources.kafka_source import KafkaRangeReader, OffsetRange, arrow_schema


def _reader(broker, topic: str, timeout: float = 20) -> KafkaRangeReader:
    plan = {"source": {"bootstrap_servers": broker.bootstrap, "topic": topic}, "timeout": timeout}
    return KafkaRangeReader(plan, {})


def _rows(batches) -> list[tuple]:
    table = pa.Table.from_batches(list(batches), arrow_schema())
    return list(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


@pytest.fixture
def fresh_pool():
    kafka_consumers.close_all()
    yield
    kafka_consumers.close_all()


def test_tasks_of_one_worker_share_a_consumer_and_each_reads_exactly_its_range(
    kafka_broker, fresh_pool
):
    topic = kafka_broker.create_topic(partitions=2)
    kafka_broker.produce(topic, [(p, f"m{n}".encode()) for p in (0, 1) for n in range(8)])
    reader = _reader(kafka_broker, topic)
    before = kafka_consumers.opened()

    first = _rows(reader.read(OffsetRange(0, 2, 5)))
    second = _rows(reader.read(OffsetRange(1, 0, 3)))
    # back on partition 0, below where the first task stopped: nothing prefetched leaks in
    third = _rows(reader.read(OffsetRange(0, 1, 3)))
    fourth = _rows(reader.read(OffsetRange(0, 5, 8)))

    assert first == [(0, 2, b"m2"), (0, 3, b"m3"), (0, 4, b"m4")]
    assert second == [(1, 0, b"m0"), (1, 1, b"m1"), (1, 2, b"m2")]
    assert third == [(0, 1, b"m1"), (0, 2, b"m2")]
    assert fourth == [(0, 5, b"m5"), (0, 6, b"m6"), (0, 7, b"m7")]
    assert kafka_consumers.opened() - before == 1

    # other settings (another broker address spelling) never get that consumer
    other = KafkaRangeReader(
        {
            "source": {"bootstrap_servers": f"localhost:{kafka_broker.port}", "topic": topic},
            "timeout": 20,
        },
        {},
    )
    assert _rows(other.read(OffsetRange(1, 6, 8))) == [(1, 6, b"m6"), (1, 7, b"m7")]
    assert kafka_consumers.opened() - before == 2


def test_a_task_stopped_early_or_failed_closes_its_consumer(kafka_broker, fresh_pool, monkeypatch):
    topic = kafka_broker.create_topic(partitions=1)
    kafka_broker.produce(topic, [(0, f"m{n}".encode()) for n in range(6)])
    monkeypatch.setattr(kafka_source, "_BATCH_ROWS", 2)
    reader = _reader(kafka_broker, topic)
    before = kafka_consumers.opened()

    batches = reader.read(OffsetRange(0, 0, 6))
    assert next(batches).num_rows == 2
    batches.close()  # Spark stopped pulling (a limit, a cancelled task)
    assert _rows(reader.read(OffsetRange(0, 0, 6))) == [(0, n, f"m{n}".encode()) for n in range(6)]
    assert kafka_consumers.opened() - before == 2

    # a range past the broker's end fails within its timeout; its consumer is not reused
    with pytest.raises(ReadError, match="not all readable"):
        list(_reader(kafka_broker, topic, timeout=2).read(OffsetRange(0, 4, 9)))
    assert _rows(reader.read(OffsetRange(0, 3, 5))) == [(0, 3, b"m3"), (0, 4, b"m4")]
    assert kafka_consumers.opened() - before == 3


def test_batches_are_cut_by_rows_and_by_bytes_with_sparks_columns(
    kafka_broker, fresh_pool, monkeypatch
):
    topic = kafka_broker.create_topic(partitions=1)
    kafka_broker.produce(topic, [(0, bytes([65 + n]) * 100) for n in range(7)])
    reader = _reader(kafka_broker, topic)

    monkeypatch.setattr(kafka_source, "_BATCH_ROWS", 3)
    batches = list(reader.read(OffsetRange(0, 0, 7)))
    assert sum(b.num_rows for b in batches) == 7
    assert [b.num_rows for b in batches] == [3, 3, 1]

    monkeypatch.setattr(kafka_source, "_BATCH_ROWS", 1000)
    monkeypatch.setattr(kafka_source, "_BATCH_BYTES", 1)
    monkeypatch.setattr(kafka_source, "_POLL_MESSAGES", 1)
    batches = list(reader.read(OffsetRange(0, 1, 5)))
    assert [b.num_rows for b in batches] == [1, 1, 1, 1]

    batch = batches[0]
    assert batch.schema == arrow_schema()
    row = batch.to_pylist()[0]
    assert row["key"] == b"0:" + b"B" * 100
    assert row["value"] == b"B" * 100
    assert row["topic"] == topic
    assert row["partition"] == 0 and row["offset"] == 1
    assert row["timestampType"] == 0  # CreateTime
    assert row["timestamp"] is not None and row["timestamp"].year >= 2024


def _produce_transaction(broker, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 0}
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, key=b"0:" + value, value=value, partition=0)
        producer.flush(10)
    producer.commit_transaction(10)


def test_a_range_ending_in_a_gap_stops_at_the_brokers_end(kafka_broker, fresh_pool):
    topic = kafka_broker.create_topic(partitions=1)
    _produce_transaction(kafka_broker, topic, [b"t0", b"t1", b"t2"])
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "probe"})
    _low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    probe.close()
    # the commit marker takes an offset that holds no message
    assert high == 4
    reader = _reader(kafka_broker, topic)
    assert _rows(reader.read(OffsetRange(0, 0, 4))) == [(0, 0, b"t0"), (0, 1, b"t1"), (0, 2, b"t2")]
    assert _rows(reader.read(OffsetRange(0, 3, 4))) == []
    kafka_broker.produce(topic, [(0, b"after")])
    assert _rows(reader.read(OffsetRange(0, 2, 5))) == [(0, 2, b"t2"), (0, 4, b"after")]


def test_the_brokers_wait_on_a_consumer_at_its_end_is_shorter_than_one_poll(
    kafka_broker, fresh_pool, monkeypatch
):
    """A consumer that read to its partition's end leaves a fetch the broker holds for
    `fetch.wait.max.ms`; the next task lent that consumer cannot fetch before the answer, so the
    wait must stay well under a poll (librdkafka's default, 500 ms, cost each such task ~0.5 s)."""
    topic = kafka_broker.create_topic(partitions=2)
    kafka_broker.produce(topic, [(p, f"m{n}".encode()) for p in (0, 1) for n in range(4)])
    configs = []
    real = kafka_consumers.Consumer

    def spy(config):
        configs.append(config)
        return real(config)

    monkeypatch.setattr(kafka_consumers, "Consumer", spy)
    reader = _reader(kafka_broker, topic)
    # a range up to the partition's end, then another partition's on the same consumer
    assert _rows(reader.read(OffsetRange(0, 0, 4))) == [(0, n, f"m{n}".encode()) for n in range(4)]
    assert _rows(reader.read(OffsetRange(1, 2, 4))) == [(1, 2, b"m2"), (1, 3, b"m3")]
    assert len(configs) == 1
    assert int(configs[0]["fetch.wait.max.ms"]) <= kafka_source._POLL_SECONDS * 1000 / 10
    # nor does a full prefetch queue postpone the next fetch by more than that (librdkafka's
    # default of 1 s stalled a task reading as fast as the broker sends)
    assert int(configs[0]["fetch.queue.backoff.ms"]) <= kafka_source._POLL_SECONDS * 1000 / 10
