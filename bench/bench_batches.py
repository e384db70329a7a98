"""Benchmark: what Tidemark adds to the Spark work of small batches, side by side in one run.

In a dedicated database `tidemark_bench_batches` on the settings' PostgreSQL server (dropped at the
end; BENCH_KEEP=1 keeps it), with one Celery worker of the default kind (threads pool, one warm
SparkSession, `local[*]`), Redis broker, and in this process a bare warm SparkSession (`local[*]`)
that does the same reads and writes without Tidemark. The two JVMs never work at the same time.

(a) One small batch: one Parquet file of 10,000 rows, `passthrough`, a Parquet file sink, from the
    moment the batch is due (`dispatch.job_run`: plan + enqueue) to its commit, against the same
    read + write timed alone in the bare session; they alternate, a new file each time, after 12
    warm-up rounds of both (JIT). The worker (bench/batch_timing_hooks.py) times each step: the
    breakdown below; both sides also record the CPU seconds their driver JVM used (/proc).
(b) Throughput of 40 one-file batches (the same kind of file) on this 2-core host, the job's next
    batch planned by the worker as each one commits: at one batch at a time (worker limit 1), and
    with several batches at once in the one session (worker limit N, job max_concurrency N);
    against the bare session processing the same 40 files one by one (and, for reference, N at a
    time on threads).

BENCH_QUICK=1 runs fewer repetitions. The worker and the measurements: bench/batches_runner.py;
the section written to docs/benchmarks.md: bench/batches_report.py.
"""

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from batches_report import write  # noqa: E402
from batches_runner import Bench  # noqa: E402

DB_NAME = "tidemark_bench_batches"
ROWS = 10_000
SINGLE = 8 if common.QUICK else 25
# a JVM's read + write of one small file keeps getting faster (JIT) for its first dozen or so
# runs: both JVMs run as many before (a) measures, so neither is compared while still colder
WARMUP = 12
THROUGHPUT_FILES = 40
CONCURRENT = [2, 4] if common.QUICK else [2, 4, 8]


def main() -> int:
    hooks = {"TIDEMARK_PROCESSOR_MODULES": "bench.batch_timing_hooks"}
    with common.worker_database(DB_NAME, prefix="tidemark-bench-batches-", env=hooks) as (
        work,
        env,
        queue,
    ):
        bench = Bench(work, env, queue, rows=ROWS)
        try:
            figures = measure(bench)
        finally:
            bench.stop()
    write(figures)
    return 0


STEPS = ["plan_enqueue", "queue", "start", "spec", "spark", "publish", "commit"]


def measure(bench: Bench) -> dict:
    loads = [os.getloadavg()[0]]
    bench.restart_worker(1)
    # (a) one small batch against the bare read + write, alternating
    single = bench.connector("single")
    job = bench.job("single", single)
    tidemark, bare = [], []
    for n in range(WARMUP + SINGLE):
        (path,) = bench.add_files(single, 1)
        if n % 2:
            bare_row = bench.bare_measured(path)
            row = bench.tidemark_batch(job)
        else:
            row = bench.tidemark_batch(job)
            bare_row = bench.bare_measured(path)
        if n >= WARMUP:
            tidemark.append(row)
            bare.append(bare_row)
    loads.append(os.getloadavg()[0])
    for row in tidemark:
        # the Spark side without the fence's transaction and the swap
        row["spark"] = row["executor"] - row.get("publish", 0.0)
        row["publish_fence"] = row.get("publish", 0.0) - row.get("swap", 0.0)

    # (b) throughput: 40 one-file batches
    many = bench.connector("many")
    paths = bench.add_files(many, THROUGHPUT_FILES)
    bare_serial = bench.bare_throughput(paths)
    serial = bench.throughput(many, paths, 1)
    concurrent = []
    bare_threads = []
    for limit in CONCURRENT:
        bench.restart_worker(limit)
        bench.bare_throughput(paths[:4])  # the bare session's JVM warmed again too
        concurrent.append(bench.throughput(many, paths, limit))
        bare_threads.append(bench.bare_throughput(paths, threads=limit))
    loads.append(os.getloadavg()[0])

    def med(key):
        return round(statistics.median(r.get(key, 0.0) for r in tidemark) * 1000, 1)

    return {
        "rows": ROWS,
        "single_batches": SINGLE,
        "tidemark_ms": med("due_to_commit"),
        "bare_ms": round(statistics.median(b["seconds"] for b in bare) * 1000, 1),
        # the JVMs' own CPU per read + write: the same work costs the same CPU, whatever the load
        "worker_jvm_cpu_ms": med("executor_jvm_cpu"),
        "bare_jvm_cpu_ms": round(statistics.median(b["jvm_cpu"] for b in bare) * 1000, 1),
        "steps_ms": {step: med(step) for step in [*STEPS, "swap", "publish_fence", "next_plan"]},
        "tidemark_samples_ms": [round(r["due_to_commit"] * 1000) for r in tidemark],
        "bare_samples_ms": [round(b["seconds"] * 1000) for b in bare],
        "bare_serial": bare_serial,
        "serial": serial,
        "concurrent": concurrent,
        "bare_threads": bare_threads,
        "loads": [round(x, 1) for x in loads],
    }


if __name__ == "__main__":
    sys.exit(main())
