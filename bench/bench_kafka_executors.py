"""Benchmark: a Kafka batch read on executors against one process building the same Arrow columns.

A Tansu broker (memory storage, loopback) holds KAFKA_EXEC_MB (default 256, BENCH_QUICK 32) of
1,000-byte values in 2 partitions. Every arm reads the same offsets, every partition from its start
to its end, alternating in one run, ROUNDS times each (medians reported):

- arrow baseline (the target's baseline): one process, one confluent-kafka consumer assigned to
  every range, `consume()` in batches of 10,000, the messages' key, value, offset and timestamp
  gathered into lists and turned into the same seven Arrow columns as Tidemark's reader, in record
  batches of 32,768 rows;
- plain consumer: the same consumer touching each message's value, building nothing;
- Tidemark reader, in this process: `KafkaRangeReader.read` over the executors' ranges one after
  another (its pooled consumer, its Arrow batches), no Spark: the Python side of a task;
- Tidemark, on executors: `read_kafka.read` written to Spark's `noop` sink in a local[2]
  SparkSession (`spark.driver.memory` 2g), warmed by a whole read and WARM_SHORT_READS short
  ones: the executors' Python workers, their Arrow batches into the JVM and every row
  materialised; the stages' task metrics (Spark's REST API) profile the JVM side: task time, the
  JVM's CPU time within it, GC and peak heap.

Reported: seconds, MB/s, MB/s per core (the baselines use one core; local[2] has two) and the
ratios. Target: executors >= 0.8x the arrow baseline (wall clock).

Also, per arm, the CPU seconds it cost (from /proc: this process and every process under it, so
the JVM and its Python workers; the broker apart), the JVM's by thread (the tasks, the JIT
compilers, the rest) and the load average: on a machine shared with other work whose CPU is
split between sessions (the kernel's autogroup), the JVM and its workers share this session's
slice, so the executors' two cores do not add up and the wall-clock ratio follows the CPU cost.
"""

import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.setup_django_path()

import pyarrow as pa  # noqa: E402
from bench_executor_reads import fill_topic  # noqa: E402
from bench_kafka import start_broker  # noqa: E402
from confluent_kafka import Consumer, Message, TopicPartition  # noqa: E402

from workers.spark.sources import kafka as read_kafka  # noqa: E402
from workers.spark.sources import kafka_consumers  # noqa: E402
from workers.spark.sources.kafka_source import (  # noqa: E402
    KafkaRangeReader,
    OffsetRange,
    arrow_schema,
)

MEGABYTES = int(os.environ.get("KAFKA_EXEC_MB") or (32 if common.QUICK else 256))
VALUE_BYTES = 1000
ROUNDS = 3 if common.QUICK else 5
TOPIC = "bench-exec"  # bench_executor_reads.fill_topic's topic
SPARK_CORES = 2
TARGET = 0.8
ARROW_ROWS = 32_768
HEAP = "2g"
WARM_SHORT_READS = 8  # batches of 1,000 offsets a partition before the timed rounds


def _consumer(bootstrap: str, ranges: dict) -> Consumer:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, start) for p, (start, _end) in ranges.items()])
    return consumer


def _wanted(pending: dict, positions: dict) -> int:
    """At most the offsets still to read: consume() waits for as many messages as it is asked
    for until its timeout, which would otherwise add the timeout to every run."""
    return max(1, min(10_000, sum(end - positions[p] for p, end in pending.items())))


def plain_consumer(bootstrap: str, ranges: dict) -> int:
    consumer = _consumer(bootstrap, ranges)
    pending = {p: end for p, (_start, end) in ranges.items()}
    positions = {p: start for p, (start, _end) in ranges.items()}
    rows = 0
    try:
        while pending:
            for message in consumer.consume(_wanted(pending, positions), 0.5):
                partition = message.partition()
                if message.error() is not None or partition not in pending:
                    continue
                offset = message.offset()
                if offset < pending[partition]:
                    rows += len(message.value()) > 0
                    positions[partition] = offset + 1
                if offset >= pending[partition] - 1:
                    del pending[partition]
    finally:
        consumer.close()
    return rows


def _batch(partition: int, keys, values, offsets, stamps) -> pa.RecordBatch:
    rows = len(offsets)
    kinds = [kind for kind, _ms in stamps]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([TOPIC] * rows, pa.string()),
            pa.array([partition] * rows, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([ms * 1000 for _kind, ms in stamps], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            pa.array([kind - 1 for kind in kinds], pa.int32()),
        ],
        schema=arrow_schema(),
    )


def arrow_baseline(bootstrap: str, ranges: dict) -> int:
    """The same offsets into the same Arrow columns, written plainly in one process."""
    consumer = _consumer(bootstrap, ranges)
    pending = {p: end for p, (_start, end) in ranges.items()}
    positions = {p: start for p, (start, _end) in ranges.items()}
    gathered = {p: ([], [], [], []) for p in ranges}
    rows = 0
    try:
        while pending:
            messages = consumer.consume(_wanted(pending, positions), 0.5)
            by_partition = {}
            for message in messages:
                if message.error() is None:
                    by_partition.setdefault(message.partition(), []).append(message)
            for partition, chunk in by_partition.items():
                if partition not in pending:
                    continue
                end = pending[partition]
                chunk = [m for m in chunk if m.offset() < end]
                keys, values, offsets, stamps = gathered[partition]
                keys += map(Message.key, chunk)
                values += map(Message.value, chunk)
                offsets += map(Message.offset, chunk)
                stamps += map(Message.timestamp, chunk)
                if offsets:
                    positions[partition] = offsets[-1] + 1
                finished = positions[partition] >= end
                if len(offsets) >= ARROW_ROWS or (finished and offsets):
                    rows += _batch(partition, keys, values, offsets, stamps).num_rows
                    gathered[partition] = ([], [], [], [])
                if finished:
                    del pending[partition]
    finally:
        consumer.close()
    return rows


def tidemark_in_process(bootstrap: str, pieces: list) -> int:
    plan = {"source": {"bootstrap_servers": bootstrap, "topic": TOPIC}, "timeout": 600}
    reader = KafkaRangeReader(plan, {})
    rows = 0
    for piece in pieces:
        for batch in reader.read(OffsetRange(*piece)):
            rows += batch.num_rows
    return rows


def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    value = call()
    return time.perf_counter() - started, value


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(stat_path: str) -> tuple[str, int, float]:
    """(name, parent pid, user + system CPU seconds) from a /proc stat file."""
    with open(stat_path) as stat:
        text = stat.read()
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def process_cpu(root: int, *, leave_out: int) -> dict[int, float]:
    """{pid: CPU seconds} of `root` and every process under it but `leave_out`'s tree."""
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                _name, parent, seconds = _cpu_seconds(f"/proc/{entry}/stat")
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
            parents[int(entry)], cpu[int(entry)] = parent, seconds
    kept, wanted = {}, {root}
    while wanted:
        pid = wanted.pop()
        if pid == leave_out or pid not in cpu:
            continue
        kept[pid] = cpu[pid]
        wanted.update(child for child, parent in parents.items() if parent == pid)
    return kept


def thread_cpu(pid: int) -> dict[str, float]:
    """{thread kind: CPU seconds} of one JVM: its task threads, its JIT compilers, the rest."""
    kinds: dict[str, float] = {}
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            name, _parent, seconds = _cpu_seconds(f"/proc/{pid}/task/{thread}/stat")
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if name.startswith("Executor task"):
            kind = "tasks"
        elif "CompilerThre" in name:
            kind = "jit"
        elif name.startswith("GC Thread") or name.startswith("G1 "):
            kind = "gc"
        else:
            kind = "other"
        kinds[kind] = kinds.get(kind, 0.0) + seconds
    return kinds


class CpuMeter:
    """CPU seconds spent by this process and its descendants (the JVM, its Python workers), and
    by the broker, between `start` and `stop`; a process gone in between loses its share."""

    def __init__(self, broker_pid: int, jvm_pid: int | None):
        self.broker_pid, self.jvm_pid = broker_pid, jvm_pid

    def start(self) -> None:
        self._ours = process_cpu(os.getpid(), leave_out=self.broker_pid)
        self._broker = process_cpu(self.broker_pid, leave_out=-1)
        self._jvm = thread_cpu(self.jvm_pid) if self.jvm_pid else {}

    def stop(self) -> dict:
        ours = process_cpu(os.getpid(), leave_out=self.broker_pid)
        broker = process_cpu(self.broker_pid, leave_out=-1)
        jvm = thread_cpu(self.jvm_pid) if self.jvm_pid else {}
        return {
            "process": ours.get(os.getpid(), 0.0) - self._ours.get(os.getpid(), 0.0),
            "spark": sum(
                seconds - self._ours.get(pid, 0.0)
                for pid, seconds in ours.items()
                if pid != os.getpid()
            ),
            "broker": sum(seconds - self._broker.get(pid, 0.0) for pid, seconds in broker.items()),
            "jvm": {kind: seconds - self._jvm.get(kind, 0.0) for kind, seconds in jvm.items()},
            "load": os.getloadavg()[0],
        }


def _jvm_pid() -> int | None:
    """The Spark JVM this process started (a child running java), if any."""
    for pid in process_cpu(os.getpid(), leave_out=-1):
        try:
            name, parent, _seconds = _cpu_seconds(f"/proc/{pid}/stat")
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if name == "java" and parent == os.getpid():
            return pid
    return None


def main() -> None:
    from workers.spark.session import get_session, stop_session

    # the UI only for its REST API: the stages' task metrics are the JVM side's profile
    spark = get_session(
        f"local[{SPARK_CORES}]",
        conf={"spark.driver.memory": HEAP, "spark.ui.enabled": "true", "spark.ui.port": "0"},
    )
    with tempfile.TemporaryDirectory(prefix="bench-kafka-exec-") as scratch:
        proc, bootstrap = start_broker(Path(scratch) / "tansu.log")
        try:
            messages = MEGABYTES * 1024 * 1024 // VALUE_BYTES
            ranges = fill_topic(bootstrap, messages)
            total = sum(end - start for start, end in ranges.values())
            source = {
                "kind": "kafka",
                "bootstrap_servers": bootstrap,
                "topic": TOPIC,
                "slices": [{"partition": p, "start": s, "end": e} for p, (s, e) in ranges.items()],
                "read_timeout_seconds": 1800,
            }
            pieces = read_kafka.split_ranges(ranges, read_kafka.PARTITION_ROWS)

            def executors():
                read_kafka.read(spark, {"source": source}).write.format("noop").mode(
                    "overwrite"
                ).save()
                return total

            arms = {
                "arrow": lambda: arrow_baseline(bootstrap, ranges),
                "plain": lambda: plain_consumer(bootstrap, ranges),
                "in_process": lambda: tidemark_in_process(bootstrap, pieces),
                "executors": executors,
            }
            executors()  # warm-up: the JVM's first Arrow conversion, the Python workers' start
            # and as a worker's long-lived session is: the JIT compilers spend ~0.2 s of CPU per
            # batch over a fresh JVM's first ten batches, ~0.1 s per batch after (planning code)
            short = {
                **source,
                "slices": [
                    {"partition": p, "start": s, "end": min(e, s + 1000)}
                    for p, (s, e) in ranges.items()
                ],
            }
            for _ in range(WARM_SHORT_READS):
                read_kafka.read(spark, {"source": short}).write.format("noop").mode(
                    "overwrite"
                ).save()
            warm = stage_totals(spark)
            meter = CpuMeter(proc.pid, _jvm_pid())
            times = {name: [] for name in arms}
            cpu = {name: [] for name in arms}
            for _ in range(ROUNDS):
                for name, call in arms.items():
                    meter.start()
                    seconds, rows = timed(call)
                    cpu[name].append(meter.stop())
                    assert rows == total, (name, rows, total)
                    times[name].append(seconds)
            opened_here = kafka_consumers.opened()
            jvm = jvm_profile(spark, warm, runs=ROUNDS)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    stop_session()
    report(total, times, len(pieces), opened_here, jvm, cpu)


def _get(spark, what: str):
    context = spark.sparkContext
    url = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/{what}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


def stage_totals(spark) -> dict:
    """Task metrics summed over every completed stage so far."""
    stages = _get(spark, "stages?status=complete")
    return {
        key: sum(stage.get(key, 0) for stage in stages)
        for key in ("executorRunTime", "executorCpuTime", "jvmGcTime", "numCompleteTasks")
    }


def jvm_profile(spark, warm: dict, *, runs: int) -> dict:
    """Per timed read (the warm-up left out): the tasks' wall time, the JVM's CPU time in them (the
    Python workers' CPU is not in it), its GC time; and the peak JVM heap the executor reported."""
    now = stage_totals(spark)
    spent = {key: now[key] - warm[key] for key in now}
    executors = _get(spark, "executors")
    heap_peak = max(
        (e.get("peakMemoryMetrics", {}).get("JVMHeapMemory", 0) for e in executors), default=0
    )
    return {
        "tasks_per_read": spent["numCompleteTasks"] / runs,
        "task_seconds_per_read": spent["executorRunTime"] / 1000 / runs,
        "jvm_cpu_seconds_per_read": spent["executorCpuTime"] / 1e9 / runs,
        "gc_seconds_per_read": spent["jvmGcTime"] / 1000 / runs,
        "heap_peak_mb": heap_peak / 1024 / 1024,
        "max_heap_mb": max((e.get("maxMemory", 0) for e in executors), default=0) / 1024 / 1024,
    }


def _autogroup_note() -> str:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as flag:
            autogroup = flag.read().strip() == "1"
    except OSError:
        autogroup = False
    if not autogroup:
        return "The kernel's autogroup is off here: CPU time is shared between threads."
    return (
        "On this machine CPU time is shared between sessions (the kernel's autogroup is on): "
        "when more sessions want the cores than there are cores, the JVM and its Python workers "
        "share this session's slice as the baseline's one process has it alone, so the "
        "executors' second core does not add up and the wall-clock ratio tends to this CPU "
        "ratio; on an idle machine they use both cores."
    )


def cpu_rows(megabytes: float, cpu: dict, labels: dict) -> tuple[list, dict]:
    """Per arm: the medians of its CPU seconds (this process; the JVM and its Python workers, and
    the JVM by thread kind; the broker)."""
    rows, medians = [], {}
    for name, label in labels.items():
        samples = cpu[name]
        process = statistics.median(s["process"] for s in samples)
        spark = statistics.median(s["spark"] for s in samples)
        broker = statistics.median(s["broker"] for s in samples)
        kinds = {
            kind: statistics.median(s["jvm"].get(kind, 0.0) for s in samples)
            for kind in ("tasks", "jit", "gc", "other")
        }
        # the arm's own work: the baselines run in this process, the executors in the JVM and its
        # workers (the driver's part is in this process)
        own = process + spark if name == "executors" else process
        medians[name] = {
            "process": process,
            "spark": spark,
            "own": own,
            "broker": broker,
            "jvm": kinds,
        }
        rows.append(
            [
                label,
                f"{process:.2f}",
                f"{spark:.2f}",
                f"{sum(kinds.values()):.2f} (tasks {kinds['tasks']:.2f}, JIT {kinds['jit']:.2f}, "
                f"GC {kinds['gc']:.2f}, other {kinds['other']:.2f})",
                f"{broker:.2f}",
                f"{own / megabytes * 1024:.1f}",
                f"{min(s['load'] for s in samples):.1f}-{max(s['load'] for s in samples):.1f}",
            ]
        )
    return rows, medians


def report(total: int, times: dict, pieces: int, opened_here: int, jvm: dict, cpu: dict) -> None:
    megabytes = total * VALUE_BYTES / 1024 / 1024
    median = {name: statistics.median(values) for name, values in times.items()}
    cores = {"arrow": 1, "plain": 1, "in_process": 1, "executors": SPARK_CORES}
    labels = {
        "arrow": "arrow baseline: one consumer, the same Arrow columns, one process",
        "plain": "plain confluent-kafka consumer (touches each value)",
        "in_process": "Tidemark's reader in one process, no Spark",
        "executors": f"Tidemark, on executors (local[{SPARK_CORES}], noop sink)",
    }
    rows = []
    for name, label in labels.items():
        rate = megabytes / median[name]
        rows.append(
            [
                label,
                f"{median[name]:.2f}",
                f"{total / median[name]:,.0f}",
                f"{rate:,.1f}",
                str(cores[name]),
                f"{rate / cores[name]:,.1f}",
                f"{median['arrow'] / median[name]:.2f}",
                f"{median['plain'] / median[name]:.2f}",
            ]
        )
    ratio = median["arrow"] / median["executors"]
    per_core = (median["arrow"] / median["executors"]) / SPARK_CORES
    verdict = "met" if ratio >= TARGET else "**missed**"
    samples = {name: [round(s, 3) for s in values] for name, values in times.items()}
    cpu_table, cpu_medians = cpu_rows(megabytes, cpu, labels)
    cpu_ratio = cpu_medians["arrow"]["own"] / cpu_medians["executors"]["own"]
    markdown = f"""## Kafka on executors against the same Arrow columns in one process (bench_kafka_executors.py)

Measured {common.now_utc()}{" (BENCH_QUICK)" if common.QUICK else ""}. A Tansu broker (memory
storage, loopback) holds {total:,} messages of {VALUE_BYTES:,}-byte values ({megabytes:,.0f} MB) in 2
partitions; every arm reads all of them by offset ranges, the four arms alternating, median of
{ROUNDS} rounds. The executors read {pieces} ranges of at most {read_kafka.PARTITION_ROWS:,} offsets; before the
rounds the session read the whole topic once and {WARM_SHORT_READS} batches of 1,000 offsets a partition (a
worker's session is long-lived: a fresh JVM's JIT compilers cost twice as much per batch at first).

| target | measured | verdict |
| --- | --- | --- |
| Kafka on executors >= {TARGET}x the arrow baseline | {ratio:.2f}x ({per_core:.2f}x per core) | {verdict} |

{common.table(["reader", "seconds", "messages/s", "MB/s", "cores", "MB/s per core", "ratio to arrow baseline", "ratio to plain consumer"], rows)}

The JVM side (task metrics from Spark's REST API, per timed read, with
`spark.driver.memory` {HEAP}): {jvm["tasks_per_read"]:.0f} tasks, {jvm["task_seconds_per_read"]:.2f} s of task
time, of which the JVM's own CPU {jvm["jvm_cpu_seconds_per_read"]:.2f} s (the rest is the tasks
waiting for their Python workers' record batches) and GC {jvm["gc_seconds_per_read"]:.2f} s; peak
JVM heap {jvm["heap_peak_mb"]:,.0f} MB (storage memory {jvm["max_heap_mb"]:,.0f} MB).

CPU seconds per read (medians): this process (the baselines' work; the driver's for the
executors), the processes under it (the JVM and its Python workers: the executors' work, and the
JVM's background work while the other arms run), the JVM alone by thread, the broker (a process
of its own); "CPU s per GB" counts the arm's own work (the executors': both of the first two
columns); the 1-minute load average seen after each read:

{common.table(["reader", "CPU s, this process", "CPU s, JVM and Python workers", "of which the JVM (by thread)", "CPU s, broker", "CPU s per GB, the arm's own", "load average"], cpu_table)}

The executors cost {1 / cpu_ratio:.2f}x the arrow baseline's CPU (the baseline over the executors:
{cpu_ratio:.2f}). {_autogroup_note()}

Consumers opened by the in-process arm over all its rounds: {opened_here} for
{pieces * ROUNDS} ranges (one per Python worker process and configuration, reused by every task).
The executors' figure includes Spark's planning of the batch (the driver's offset check), the
Arrow batches' transfer into the JVM and the `noop` sink; "per core" divides by the cores each
arm may use (the 2 machine cores are shared with other work). Samples (s): {samples}
"""
    common.write_section(
        "kafka_executors",
        markdown,
        {
            "messages": total,
            "megabytes": megabytes,
            "median_seconds": median,
            "samples": times,
            "jvm": jvm,
            "cpu_samples": cpu,
            "cpu_medians": cpu_medians,
        },
    )
    print(markdown)


if __name__ == "__main__":
    main()
