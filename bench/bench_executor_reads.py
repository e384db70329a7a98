"""Benchmark: one Kafka batch and one object-store batch read on executors with the driver bounded.

The batch readers (`workers.spark.sources.kafka.read`, `workers.spark.sources.object_store.read`) plan on
the driver and read on executors (Python data sources); this measures one big batch of each kind
in a local[2] SparkSession whose driver JVM has `spark.driver.memory` 512m, written to Spark's
`noop` sink (every row materialised, nothing kept), against a plain single-process read of the
same data:

- Kafka: a Tansu broker (memory storage, loopback) holds EXEC_BENCH_MB of 1,000-byte values in 2
  partitions; baseline = one confluent-kafka consumer touching every value.
- Object store: EXEC_BENCH_MB of Parquet objects (64 MB each, an id and a 1,000-byte string a
  row) read through fsspec's local filesystem (`file://` locations: the same reader code as
  `s3://`, without a network store's costs); baseline = pyarrow reading the objects one by one.

Reported: rows, bytes, seconds, rows/s and MB/s, the ratio to the baseline, and the driver Python
process's peak RSS (it plans, never holds rows). EXEC_BENCH_MB (default 1024; BENCH_QUICK=1: 64)
sets the size. The old driver-side path (consume into one Arrow table, then `createDataFrame`)
is gone; its 0.35x figure is in the Kafka section above, and at 1 GB it needed the whole batch in
the driver's memory.
"""

import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bench_kafka import start_broker  # noqa: E402

common.setup_django_path()

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from workers.spark.sources import kafka as read_kafka  # noqa: E402
from workers.spark.sources import object_store as read_object_store  # noqa: E402

MEGABYTES = int(os.environ.get("EXEC_BENCH_MB") or (64 if common.QUICK else 1024))
VALUE_BYTES = 1000
PARTITIONS = 2
OBJECT_MB = 64
ROUNDS = 1 if MEGABYTES >= 512 else 3
TOPIC = "bench-exec"
DRIVER_MEMORY = "512m"


def fill_topic(bootstrap: str, messages: int) -> dict[int, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(timeout=10)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 5000,
            "queue.buffering.max.kbytes": 256 * 1024,
        }
    )
    value = b"v" * VALUE_BYTES
    per_partition = messages // PARTITIONS
    for n in range(per_partition - 1):
        for partition in range(PARTITIONS):
            producer.produce(TOPIC, key=str(n).encode(), value=value, partition=partition)
        if n % 5_000 == 0:
            producer.flush(120)
    producer.flush(120)
    for partition in range(PARTITIONS):  # a lone last record: the reported end is then right
        producer.produce(TOPIC, key=b"last", value=value, partition=partition)
        producer.flush(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    ranges = {}
    for partition in range(PARTITIONS):
        ranges[partition] = consumer.get_watermark_offsets(
            TopicPartition(TOPIC, partition), timeout=10, cached=False
        )
    consumer.close()
    return ranges


def kafka_baseline(bootstrap: str, ranges: dict) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, start) for p, (start, _end) in ranges.items()])
    pending = {p: end for p, (_start, end) in ranges.items()}
    rows = 0
    try:
        while pending:
            for message in consumer.consume(10_000, 0.5):
                partition = message.partition()
                if message.error() is not None or partition not in pending:
                    continue
                if message.offset() < pending[partition]:
                    rows += len(message.value()) > 0
                if message.offset() >= pending[partition] - 1:
                    del pending[partition]
    finally:
        consumer.close()
    return rows


def write_objects(directory: Path, megabytes: int) -> tuple[list[str], int]:
    rows_per_object = OBJECT_MB * 1024 * 1024 // (VALUE_BYTES + 8)
    value = "x" * VALUE_BYTES
    locations, rows = [], 0
    for n in range(max(1, megabytes // OBJECT_MB)):
        first = n * rows_per_object
        table = pa.table(
            {
                "id": pa.array(range(first, first + rows_per_object), pa.int64()),
                "payload": pa.array([value] * rows_per_object, pa.string()),
            }
        )
        path = directory / f"part-{n:04d}.parquet"
        pq.write_table(table, path, compression="none", use_dictionary=False)
        locations.append(f"file://{path}")
        rows += rows_per_object
    return locations, rows


def objects_baseline(locations: list[str]) -> int:
    rows = 0
    for location in locations:
        rows += pq.read_table(location.removeprefix("file://")).num_rows
    return rows


def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    value = call()
    return time.perf_counter() - started, value


def timed_call(function, *args) -> tuple[float, object]:
    started = time.perf_counter()
    value = function(*args)
    return time.perf_counter() - started, value


def to_noop(df) -> None:
    df.write.format("noop").mode("overwrite").save()


def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM) over its whole life."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def in_child(function, *args):
    """`function(*args)` in a fresh process, so the data the baselines and the generators hold
    never counts in the driver's memory."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def main() -> None:
    from workers.spark.session import get_session, stop_session

    spark = get_session("local[2]", conf={"spark.driver.memory": DRIVER_MEMORY})
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-exec-") as scratch:
        scratch = Path(scratch)
        proc, bootstrap = start_broker(scratch / "tansu.log")
        try:
            messages = MEGABYTES * 1024 * 1024 // VALUE_BYTES
            started = time.perf_counter()
            ranges = in_child(fill_topic, bootstrap, messages)
            produce_seconds = time.perf_counter() - started
            total = sum(end - start for start, end in ranges.values())
            source = {
                "kind": "kafka",
                "bootstrap_servers": bootstrap,
                "topic": TOPIC,
                "slices": [{"partition": p, "start": s, "end": e} for p, (s, e) in ranges.items()],
                "read_timeout_seconds": 1800,
            }
            times = {"baseline": [], "executors": []}
            for _ in range(ROUNDS):
                seconds, rows = in_child(timed_call, kafka_baseline, bootstrap, ranges)
                assert rows == total, (rows, total)
                times["baseline"].append(seconds)
                seconds, _ = timed(lambda: to_noop(read_kafka.read(spark, {"source": source})))
                times["executors"].append(seconds)
            results["kafka"] = {
                "rows": total,
                "bytes": total * VALUE_BYTES,
                "produce_seconds": produce_seconds,
                **{name: statistics.median(values) for name, values in times.items()},
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)

        locations, total = in_child(write_objects, scratch, MEGABYTES)
        size = sum(os.path.getsize(location.removeprefix("file://")) for location in locations)
        spec = {
            "format": "parquet",
            "source": {
                "kind": "object_store",
                "format": "parquet",
                "objects": [{"location": location, "size": None} for location in locations],
            },
        }
        times = {"baseline": [], "executors": []}
        for _ in range(ROUNDS):
            seconds, rows = in_child(timed_call, objects_baseline, locations)
            assert rows == total
            times["baseline"].append(seconds)
            seconds, _ = timed(lambda: to_noop(read_object_store.read(spark, spec)))
            times["executors"].append(seconds)
        results["objects"] = {
            "rows": total,
            "bytes": size,
            **{name: statistics.median(values) for name, values in times.items()},
        }
    peak = peak_rss_mb()
    stop_session()
    report(results, peak)


def report(results: dict, peak_rss_mb: float) -> None:
    rows = []
    for kind, label, baseline in (
        ("kafka", "Kafka batch", "plain confluent-kafka consumer"),
        ("objects", "object-store batch (Parquet, fsspec file://)", "pyarrow, object by object"),
    ):
        figures = results[kind]
        megabytes = figures["bytes"] / 1024 / 1024
        for name, reader in (("baseline", baseline), ("executors", "Tidemark, on executors")):
            seconds = figures[name]
            rows.append(
                [
                    label,
                    reader,
                    f"{figures['rows']:,}",
                    f"{megabytes:,.0f}",
                    f"{seconds:.1f}",
                    f"{figures['rows'] / seconds:,.0f}",
                    f"{megabytes / seconds:,.1f}",
                    f"{figures['baseline'] / seconds:.2f}",
                ]
            )
    reached = min(results[kind]["bytes"] for kind in results) / 10**9
    target = f"met: {reached:.2f} GB" if reached >= 1 else f"**missed**: {reached:.2f} GB"
    markdown = f"""## Executor-side reads: one big Kafka batch and one big object-store batch (bench_executor_reads.py)

Measured {common.now_utc()}{" (BENCH_QUICK)" if common.QUICK else ""} on a local[2] SparkSession
with `spark.driver.memory` {DRIVER_MEMORY}, each batch written to Spark's `noop` sink (every row
materialised), median of {ROUNDS} round(s). Target: >= 1 GB (10^9 bytes) a batch ({target}). The driver
Python process's peak RSS over the whole run: {peak_rss_mb:,.0f} MB (it plans; the rows stay in
the executors' Python workers and the JVM's streaming pipeline; data generation and the baselines
run in a child process). Filling the topic took
{results["kafka"]["produce_seconds"]:.0f} s.

{common.table(["batch", "reader", "rows", "MB", "seconds", "rows/s", "MB/s", "ratio to baseline"], rows)}

The baselines run in one process with nothing after the read; the executor path adds Arrow
batches into the JVM and the sink, in exchange for running on as many executors as the cluster
has, with no batch size bound by the driver's memory. The old driver-side path (one Arrow table
in the driver, then `createDataFrame`) is not measured here: it is gone, and a 1 GB batch needed
1 GB and more in the driver process and its JVM.
"""
    common.write_section("executor_reads", markdown, {**results, "peak_rss_mb": peak_rss_mb})
    print(markdown)


if __name__ == "__main__":
    main()
