"""Benchmark: batches end to end through Celery and PySpark (a real worker process, real Redis).

In a dedicated database `tidemark_bench_worker` on the settings' PostgreSQL server (dropped at the
end; BENCH_KEEP=1 keeps it), with one Celery worker (prefork, concurrency 1) on a queue of its own:

1. One small batch (one Parquet file of 1,000 order events, `orders_hourly` into a Parquet sink),
   measured from `job_run` (plan + enqueue) to the committed batch being visible: Celery dispatch,
   lease, the warm session's Spark job, the sink, the commit. Then the same with the `submit`
   executor: one new spark-submit process (its own JVM and driver) per batch, on the same files.
   The ratio is the point of the warm session (target: at least 15x).
2. Throughput: batches per second through Celery for a trivial processor (`passthrough` of a
   10-row file), each batch planned by the worker when the previous one commits.
3. An incremental run when 1% of the data is new against a full reprocessing of all of it
   (100 files of 10,000 events, `orders_hourly`): target at most 5% of the full run plus the fixed
   per-batch cost measured in 1.

BENCH_QUICK=1 runs a smaller version.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DB_NAME = "tidemark_bench_worker"
WARM_BATCHES = 3 if common.QUICK else 6
SUBMIT_BATCHES = 1 if common.QUICK else 3
THROUGHPUT_BATCHES = 10 if common.QUICK else 20
FULL_FILES = 20 if common.QUICK else 100
ROWS_PER_FILE = 2_000 if common.QUICK else 10_000
INCREMENTS = 3


def write_orders(path: Path, *, first_id: int, rows: int, day: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=day)
    ids = range(first_id, first_id + rows)
    pq.write_table(
        pa.table(
            {
                "order_id": pa.array(ids, pa.int64()),
                "customer_id": pa.array([i % 97 for i in ids], pa.int64()),
                "amount": pa.array([float(i % 500) / 10 for i in ids], pa.float64()),
                "event_time": pa.array(
                    [start + timedelta(seconds=(i * 7) % 86_400) for i in ids],
                    pa.timestamp("us", "UTC"),
                ),
            }
        ),
        path,
    )


class Bench:
    def __init__(self, work: Path, queue: str):
        self.work = work
        self.queue = queue
        self.counter = 0

    def connector(self, name: str):
        from inventory.services.connectors import connector_create

        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        return connector_create(name=name, kind="files", config={"path": str(folder)})

    def add_files(self, connector, count: int, rows: int) -> None:
        from inventory.sources.files import directory_discover

        folder = Path(connector.config["path"])
        for _ in range(count):
            self.counter += 1
            write_orders(
                folder / f"f{self.counter:06d}.parquet",
                first_id=self.counter * rows,
                rows=rows,
                day=self.counter % 30,
            )
        directory_discover(connector=connector)

    def job(self, name: str, connector, **options):
        from inventory.services.jobs import job_create

        return job_create(
            name=name,
            connector=connector,
            batch_weight=10**12,
            sink={"kind": "files", "path": str(self.work / f"sink-{name}")},
            **options,
        )

    def run_until_settled(self, job, timeout: float = 600) -> float:
        """Seconds from job_run to every item committed (the watermark at the last item)."""
        from inventory.models import Asset, Batch, BatchStatus, Watermark
        from inventory.services.dispatch import job_run

        last = Asset.objects.filter(connector=job.connector).order_by("-pk").first().pk
        started = time.perf_counter()
        job_run(job=job)
        while True:
            position = Watermark.objects.values_list("position", flat=True).get(job=job)
            if position > last:
                return time.perf_counter() - started
            dead = Batch.objects.filter(job=job, status=BatchStatus.DEAD).first()
            if dead is not None:
                raise RuntimeError(f"batch {dead.pk} died: {dead.error}")
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"job {job.name} did not finish within {timeout} s")
            time.sleep(0.01)


def start_worker(
    env: dict, queue: str, log: Path, *, pool: str = "prefork", concurrency: int = 1
) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - held by the child
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
            "-Q",
            queue,
            "-n",
            f"bench-{uuid.uuid4().hex[:6]}@%h",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "--loglevel=INFO",
        ],
        cwd=common.ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out.close()
    deadline = time.monotonic() + 180
    while "warm SparkSession ready" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return proc


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main() -> int:
    with common.worker_database(DB_NAME, prefix="tidemark-bench-worker-") as (work, env, queue):
        worker = start_worker(env, queue, work / "worker.log")
        try:
            figures = measure(Bench(work, queue))
        finally:
            stop_worker(worker)
    write(figures)
    return 0


def measure(bench: Bench) -> dict:
    load_start = round(os.getloadavg()[0], 1)
    # 1. one small batch: warm session vs one spark-submit process per batch, same files
    source = bench.connector("small")
    warm_job = bench.job("warm", source, processor="orders_hourly", max_items=1)
    bench.add_files(source, 1, 1_000)
    bench.run_until_settled(warm_job)  # the first batch of the process is not counted
    # every spark-submit batch is a cold process anyway; this job starts at the next file
    last = warm_job.connector.assets.order_by("-pk").first().pk
    submit_job = bench.job(
        "submit",
        source,
        processor="orders_hourly",
        executor="submit",
        max_items=1,
        start_position=last + 1,
    )
    warm, submit = [], []
    for n in range(max(WARM_BATCHES, SUBMIT_BATCHES)):
        bench.add_files(source, 1, 1_000)
        warm.append(bench.run_until_settled(warm_job))
        if n < SUBMIT_BATCHES:
            submit.append(bench.run_until_settled(submit_job))
    warm_median = statistics.median(warm)
    submit_median = statistics.median(submit)

    # 2. throughput: trivial batches through Celery, planned one after another by the worker
    tiny = bench.connector("tiny")
    bench.add_files(tiny, THROUGHPUT_BATCHES, 10)
    trivial = bench.job("trivial", tiny, processor="passthrough", max_items=1)
    throughput_seconds = bench.run_until_settled(trivial)

    # 3. incremental (1% new) against a full reprocessing of everything
    big = bench.connector("big")
    bench.add_files(big, FULL_FILES, ROWS_PER_FILE)
    full_job = bench.job("full", big, processor="orders_hourly", max_items=FULL_FILES)
    full = bench.run_until_settled(full_job)
    increments = []
    for _ in range(INCREMENTS):  # each adds 1% new data; the median run counts
        bench.add_files(big, max(FULL_FILES // 100, 1), ROWS_PER_FILE)
        increments.append(bench.run_until_settled(full_job))
    incremental = statistics.median(increments)
    full_again = _rerun_everything(bench, big)  # all 103 files, warm, as one batch

    return {
        "warm_batch_seconds": warm,
        "submit_batch_seconds": submit,
        "warm_median_s": round(warm_median, 3),
        "submit_median_s": round(submit_median, 3),
        "ratio": round(submit_median / warm_median, 1),
        "throughput_batches": THROUGHPUT_BATCHES,
        "throughput_seconds": round(throughput_seconds, 2),
        "batches_per_second": round(THROUGHPUT_BATCHES / throughput_seconds, 2),
        "full_files": FULL_FILES,
        "rows_per_file": ROWS_PER_FILE,
        "full_run_s": round(full, 2),
        "full_rerun_s": round(full_again, 2),
        "incremental_run_s": round(incremental, 2),
        "incremental_runs_s": [round(x, 2) for x in increments],
        "incremental_share": round(incremental / full_again, 3),
        "fixed_batch_cost_s": round(warm_median, 3),
        "incremental_target_s": round(0.05 * full_again + warm_median, 2),
        "load_start": load_start,
        "load_end": round(os.getloadavg()[0], 1),
    }


def _rerun_everything(bench: Bench, connector) -> float:
    """A full reprocessing on a warm worker: a new job over the same files (all of them)."""
    job = bench.job("full-again", connector, processor="orders_hourly", max_items=10**6)
    return bench.run_until_settled(job)


def write(f: dict) -> None:
    ok_ratio = f["ratio"] >= 15
    ok_incremental = f["incremental_run_s"] <= f["incremental_target_s"]
    rows = [
        ["one small batch, warm session (median)", f"{f['warm_median_s']:.2f} s"],
        ["one small batch, new spark-submit process (median)", f"{f['submit_median_s']:.2f} s"],
        ["ratio (target >= 15x)", f"{f['ratio']}x {'(met)' if ok_ratio else '(NOT met)'}"],
        [
            f"throughput, trivial processor ({f['throughput_batches']} batches)",
            f"{f['batches_per_second']} batches/s",
        ],
        [
            f"full reprocessing ({f['full_files']} files x {f['rows_per_file']:,} rows)",
            f"{f['full_rerun_s']:.2f} s",
        ],
        ["incremental run, 1% new (median of 3)", f"{f['incremental_run_s']:.2f} s"],
        [
            "target: 5% of full + fixed batch cost",
            f"{f['incremental_target_s']:.2f} s {'(met)' if ok_incremental else '(NOT met)'}",
        ],
    ]
    markdown = (
        "## Workers: batches end to end through Celery and PySpark\n\n"
        f"Run on {common.now_utc()} (`bench/bench_worker.py`). One Celery worker (prefork, "
        "concurrency 1) with a warm SparkSession (`local[*]`), Redis broker, PostgreSQL; every time "
        "runs from `job_run` (plan + enqueue) until the committed watermark covers the last item. "
        "The spark-submit figure is a new driver JVM per batch on the same file and processor.\n\n"
        + common.table(["measure", "result"], rows)
        + f"\n\nWarm batches (s): {', '.join(f'{s:.2f}' for s in f['warm_batch_seconds'])}; "
        f"spark-submit batches (s): {', '.join(f'{s:.2f}' for s in f['submit_batch_seconds'])}. "
        f"The first full run (cold caches) took {f['full_run_s']:.2f} s. Load average (1 min) "
        f"at the start and end: {f['load_start']} / {f['load_end']} (2 cores; other processes "
        "on the machine inflate the times).\n"
    )
    common.write_section("worker", markdown, f)
    print(json.dumps(f, indent=2))


if __name__ == "__main__":
    sys.exit(main())
