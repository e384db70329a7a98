"""The moving parts of bench_batches.py: the Celery worker it starts and stops, the files and jobs
it makes, and its measurements (one batch from due to commit, the throughput of many, the bare
session's read + write of the same files).
"""

import json
import os
import statistics
import threading
import time
import uuid
from pathlib import Path

from batch_timing_hooks import jvm_cpu_seconds
from bench_worker import start_worker, stop_worker, write_orders

WORKER_WARMUP_BATCHES = 12
# The bench waits for the worker without taking CPU from it (2 cores: a loop that polls every few
# ms and queries PostgreSQL each time slowed the worker's batch it was waiting for). The figures
# come from the worker's own timestamps, so polling less often changes none of them.
POLL_SECONDS = 0.02
THROUGHPUT_POLL_SECONDS = 0.2
FAILURE_CHECK_SECONDS = 1.0


class Bench:
    def __init__(self, work: Path, env: dict, queue: str, *, rows: int):
        self.work = work
        self.rows = rows
        self.env = env
        self.queue = queue
        self.counter = 0
        self.timing_file = work / "timings.jsonl"
        self._timings: dict[int, dict] = {}
        self._timings_read = 0  # bytes of the file already parsed
        self.worker = None
        from workers.spark.session import get_session

        self.spark = get_session(master="local[*]")

    # ---- the worker --------------------------------------------------------------------------

    def restart_worker(self, limit: int) -> None:
        if self.worker is not None:
            stop_worker(self.worker)
        env = {**self.env, "BENCH_TIMING_FILE": str(self.timing_file)}
        self.worker = start_worker(
            {**env, "TIDEMARK_BATCHES_PER_WORKER": str(limit)},
            self.queue,
            self.work / f"worker-{limit}.log",
            pool="threads",
            concurrency=limit,
        )
        # a new JVM's first jobs are slow (class loading, JIT): a dozen batches before measuring
        warm = self.connector(f"warmup-{limit}-{uuid.uuid4().hex[:4]}")
        paths = self.add_files(warm, max(WORKER_WARMUP_BATCHES, 3 * limit))
        self.throughput(warm, paths, limit)

    def stop(self) -> None:
        if self.worker is not None:
            stop_worker(self.worker)

    def timings(self) -> dict[int, dict]:
        """The worker's timings so far; only the lines added since the last call are parsed."""
        if not self.timing_file.exists():
            return self._timings
        with open(self.timing_file, "rb") as timings:
            timings.seek(self._timings_read)
            added = timings.read()
        complete = added[: added.rfind(b"\n") + 1]  # a line being written is read next time
        self._timings_read += len(complete)
        for line in complete.decode().splitlines():
            row = json.loads(line)
            self._timings[row["batch"]] = row
        return self._timings

    # ---- data ----------------------------------------------------------------------------------

    def connector(self, name: str):
        from inventory.services.connectors import connector_create

        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        return connector_create(
            name=name, kind="files", config={"path": str(folder), "settle_seconds": 0}
        )

    def add_files(self, connector, count: int) -> list[Path]:
        from inventory.sources.files import directory_discover

        folder = Path(connector.config["path"])
        paths = []
        for _ in range(count):
            self.counter += 1
            path = folder / f"f{self.counter:06d}.parquet"
            write_orders(
                path, first_id=self.counter * self.rows, rows=self.rows, day=self.counter % 30
            )
            old = time.time() - 60
            os.utime(path, (old, old))
            paths.append(path)
        directory_discover(connector=connector)
        return paths

    def job(self, name: str, connector, **options):
        from inventory.services.jobs import job_create

        return job_create(
            name=name,
            connector=connector,
            batch_weight=10**12,
            max_items=1,
            processor="passthrough",
            sink={"kind": "files", "path": str(self.work / f"sink-{name}")},
            **options,
        )

    # ---- measurements --------------------------------------------------------------------------

    def tidemark_batch(self, job) -> dict:
        """One batch from due to commit; the worker's step timings."""
        from inventory.services.dispatch import job_run

        due_wall = time.time()
        started = time.perf_counter()
        outcome = job_run(job=job)
        plan_s = time.perf_counter() - started
        (batch_id,) = outcome.planned
        timings = self._wait_for([batch_id])[batch_id]
        return {
            **timings,
            "plan_enqueue": plan_s,
            "queue": timings["task_start_wall"] - due_wall - plan_s,
            "due_to_commit": timings["commit_end_wall"] - due_wall,
        }

    def _wait_for(self, batch_ids: list[int], timeout: float = 600) -> dict[int, dict]:
        from inventory.models import Batch, BatchStatus

        deadline = time.monotonic() + timeout
        next_check = time.monotonic() + FAILURE_CHECK_SECONDS
        while True:
            found = self.timings()
            if all(b in found for b in batch_ids):
                return found
            if time.monotonic() > next_check:
                next_check = time.monotonic() + FAILURE_CHECK_SECONDS
                dead = Batch.objects.filter(
                    pk__in=batch_ids, status__in=[BatchStatus.DEAD, BatchStatus.FAILED]
                ).first()
                if dead is not None:
                    raise RuntimeError(f"batch {dead.pk} failed: {dead.error}")
            if time.monotonic() > deadline:
                log = "\n".join(
                    p.read_text(errors="replace")[-3000:] for p in self.work.glob("worker-*.log")
                )
                raise RuntimeError(
                    f"batches {batch_ids} did not commit within {timeout} s; worker log:\n{log}"
                )
            time.sleep(POLL_SECONDS)

    def bare(self, path: Path) -> float:
        out = self.work / "bare" / uuid.uuid4().hex
        started = time.perf_counter()
        self.spark.read.parquet(str(path)).write.parquet(str(out))
        return time.perf_counter() - started

    def bare_measured(self, path: Path) -> dict:
        """The bare read + write of `path`: seconds, and the CPU seconds its JVM used."""
        before = jvm_cpu_seconds(self.spark)
        seconds = self.bare(path)
        return {"seconds": seconds, "jvm_cpu": jvm_cpu_seconds(self.spark) - before}

    def throughput(self, connector, paths: list[Path], limit: int) -> dict:
        from inventory.models import Batch, Watermark
        from inventory.services.dispatch import job_run

        job = self.job(
            f"throughput-{limit}-{uuid.uuid4().hex[:4]}", connector, max_concurrency=limit
        )
        first = Batch.objects.filter(job=job).count()
        assert first == 0
        load = os.getloadavg()[0]
        started_wall = time.time()
        job_run(job=job)
        last = max(a.pk for a in connector.assets.all())
        deadline = time.monotonic() + 900
        while Watermark.objects.values_list("position", flat=True).get(job=job) <= last:
            if time.monotonic() > deadline:
                raise RuntimeError("throughput run did not finish")
            time.sleep(THROUGHPUT_POLL_SECONDS)
        ids = list(Batch.objects.filter(job=job).values_list("pk", flat=True))
        timings = self._wait_for(ids)
        end_wall = max(timings[b]["commit_end_wall"] for b in ids)
        seconds = end_wall - started_wall
        rows = [timings[b] for b in ids]
        # how many of the job's batches were inside a task at once, sampled at each task start
        at_once = [
            sum(1 for r in rows if r["task_start_wall"] <= t < r["task_end_wall"])
            for t in (row["task_start_wall"] for row in rows)
        ]
        return {
            "executor_ms": round(statistics.median(r["executor"] for r in rows) * 1000, 1),
            "task_ms": round(
                statistics.median(r["task_end_wall"] - r["task_start_wall"] for r in rows) * 1000,
                1,
            ),
            "mean_in_flight": round(sum(at_once) / len(at_once), 2),
            "limit": limit,
            "batches": len(ids),
            "seconds": round(seconds, 2),
            "per_second": round(len(ids) / seconds, 2),
            "load": round(load, 1),
        }

    def bare_throughput(self, paths: list[Path], threads: int = 1) -> dict:
        load = os.getloadavg()[0]
        pending = list(paths)
        lock = threading.Lock()

        def work():
            while True:
                with lock:
                    if not pending:
                        return
                    path = pending.pop(0)
                self.bare(path)

        started = time.perf_counter()
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        seconds = time.perf_counter() - started
        return {
            "threads": threads,
            "files": len(paths),
            "seconds": round(seconds, 2),
            "per_second": round(len(paths) / seconds, 2),
            "load": round(load, 1),
        }
