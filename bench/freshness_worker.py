"""The real-worker arms of bench_freshness_throttle.py: one Celery worker process, a live files job
fed at a steady rate with a freshness target, and a large backfill of another job started beside
it, three ways (static priority, a fixed throttle, the freshness controller).

What runs where:

- the **worker**: one `celery worker --pool=threads` process with the project's defaults (4
  threads, 4 batch slots in one warm SparkSession, `local[*]`), on a queue of its own;
- a **writer** thread of this process puts a new small Parquet file into the live connector's
  folder every `1 / LIVE_FILES_PER_S` seconds (written under a temporary name, then renamed);
- a **beat** thread of this process does what beat's entries do, on beat's intervals: the live
  connector's discovery every second (`scheduling.connector_discover`: registration, then
  `job_run`), the sweep of due batches and the backfill pacing step (the freshness controller
  first, `freshness.backfills_pace_step`) every 5 s. They run here rather than as tasks on the
  worker's threads so that each arm's steps start on time; the worker still gets every nudge
  through Redis;
- a **sampler** thread reads the live job's freshness every second as the pages and the
  controller read it (`selectors_freshness.jobs_freshness`: the age of its oldest item not
  committed, from registration).

Each arm gets its own history connector (files written before the worker starts) and job; its
items are skipped by a watermark correction (so the job's incremental lane has nothing to do),
then a backfill over all of them (max_concurrency 3, priority 0) runs until it completes. The live
job's samples while the backfill runs give the share inside the target; the backfill's files per
second against the static-priority arm's give its speed.
"""

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import common
from bench_worker import start_worker, stop_worker, write_orders


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


DB_NAME = "tidemark_bench_freshness"
SLOTS = 4  # the worker's threads and batch slots (the project's default)
ROWS = _env_int("FRESHNESS_ROWS", 200)  # rows per file: small, so a batch's cost is its own
# a live rate the worker keeps inside its target alone but not beside an unthrottled backfill (at
# 4 and 6 a second static priority stayed inside on a quiet machine: nothing to compare)
LIVE_FILES_PER_S = _env_float("FRESHNESS_LIVE_FILES_PER_S", 9.0)
LIVE_MAX_ITEMS = _env_int("FRESHNESS_LIVE_MAX_ITEMS", 2)  # files per live batch at most
TARGET_SECONDS = _env_int("FRESHNESS_TARGET_SECONDS", 20)
BACKFILL_FILES = _env_int("FRESHNESS_BACKFILL_FILES", 150 if common.QUICK else 800)
BACKFILL_MAX_ITEMS = _env_int("FRESHNESS_BACKFILL_MAX_ITEMS", 1)  # files per backfill batch
BACKFILL_CONCURRENCY = _env_int("FRESHNESS_BACKFILL_CONCURRENCY", 3)
WARMUP_SECONDS = _env_int("FRESHNESS_WARMUP_SECONDS", 20 if common.QUICK else 40)
# a backfill run unthrottled before the arms, not counted: the worker's paths for several batches
# at once warm up there (in the first two full runs, the first arm was the slower one each time)
WARMUP_BACKFILL_FILES = _env_int("FRESHNESS_WARMUP_BACKFILL_FILES", 30 if common.QUICK else 100)
SETTLE_LIMIT_SECONDS = 180  # between arms: the live job back near its watermark, at most this
ARM_LIMIT_SECONDS = _env_int("FRESHNESS_ARM_LIMIT_SECONDS", 900)
DISCOVER_EVERY = 1.0
PACE_EVERY = 5.0  # beat's pace-backfills and requeue-due entries


@dataclass
class Sample:
    at: float  # time.time()
    seconds_behind: int | None
    used: float | None


@dataclass
class ArmResult:
    name: str
    mode: str
    seconds: float = 0.0
    files: int = 0
    weight: int = 0
    samples: list = field(default_factory=list)
    decisions: list = field(default_factory=list)
    fixed_rate: int | None = None
    load: tuple = ()

    @property
    def inside(self) -> float:
        known = [s for s in self.samples if s.seconds_behind is not None]
        if not known:
            return 0.0
        return sum(1 for s in known if s.seconds_behind <= TARGET_SECONDS) / len(known)

    def behind(self, quantile: float) -> int:
        values = sorted(s.seconds_behind or 0 for s in self.samples)
        if not values:
            return 0
        return values[min(len(values) - 1, int(quantile * len(values)))]


class Loop(threading.Thread):
    """A daemon thread running `tick` every `every` seconds until stopped; errors are kept."""

    def __init__(self, name: str, every: float, tick):
        super().__init__(name=name, daemon=True)
        self.every = every
        self.tick = tick
        self.stopped = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        from django.db import connection

        due = time.monotonic()
        try:
            while not self.stopped.is_set():
                try:
                    self.tick()
                except Exception as exc:  # reported by the bench at the end of its arm
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                due += self.every
                self.stopped.wait(max(0.0, due - time.monotonic()))
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=60)


class Bench:
    def __init__(self, work: Path, env: dict, queue: str):
        self.work = work
        self.env = env
        self.queue = queue
        self.counter = 0
        self.worker = None
        self.samples: list[Sample] = []
        self.lock = threading.Lock()
        self.loops: list[Loop] = []
        self.live_connector = None
        self.live_job = None
        self.history: dict[str, tuple] = {}  # arm -> (job, first id, last id, heaviest)

    # ---- data -----------------------------------------------------------------------------------

    def _file(self, folder: Path) -> Path:
        self.counter += 1
        tmp = folder / f".f{self.counter:07d}.tmp"
        write_orders(tmp, first_id=self.counter * ROWS, rows=ROWS, day=self.counter % 30)
        path = folder / f"f{self.counter:07d}.parquet"
        os.rename(tmp, path)  # whole at once: discovery never sees half a file
        return path

    def connector(self, name: str):
        from inventory.services.connectors import connector_create

        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        return connector_create(
            name=name, kind="files", config={"path": str(folder), "settle_seconds": 0}
        )

    def job(self, name: str, connector, **options):
        from inventory.services.jobs import job_create

        return job_create(
            name=name,
            connector=connector,
            processor="passthrough",
            sink={"kind": "files", "path": str(self.work / f"sink-{name}")},
            **options,
        )

    def history_prepare(self, name: str, files: int = BACKFILL_FILES) -> None:
        """A connector of `files` files, registered; its job's lane skips them all."""
        from inventory.services.corrections import watermark_correct
        from inventory.sources.files import directory_discover

        connector = self.connector(f"history-{name}")
        folder = Path(connector.config["path"])
        for _ in range(files):
            self._file(folder)
        directory_discover(connector=connector)
        assets = connector.assets.order_by("pk")
        heaviest = max(a.weight for a in assets)
        job = self.job(
            f"history-{name}",
            connector,
            max_items=BACKFILL_MAX_ITEMS,
            batch_weight=heaviest * BACKFILL_MAX_ITEMS,
            max_concurrency=BACKFILL_CONCURRENCY,
        )
        watermark_correct(
            job=job,
            value=assets.last().pk,
            actor="bench",
            reason="the benchmark backfills these items; the incremental lane skips them",
        )
        self.history[name] = (job, assets.first().pk, assets.last().pk, heaviest)

    # ---- processes and threads -----------------------------------------------------------------

    def start(self) -> None:
        self.worker = start_worker(
            {**self.env, "TIDEMARK_BATCHES_PER_WORKER": str(SLOTS)},
            self.queue,
            self.work / "worker.log",
            pool="threads",
            concurrency=SLOTS,
        )
        self.live_connector = self.connector("live")
        self.live_job = self.job(
            "live",
            self.live_connector,
            max_items=LIVE_MAX_ITEMS,
            batch_weight=10**12,
            max_concurrency=1,
            freshness_target_seconds=TARGET_SECONDS,
        )
        live_folder = Path(self.live_connector.config["path"])
        self.loops = [
            Loop("writer", 1.0 / LIVE_FILES_PER_S, lambda: self._file(live_folder)),
            Loop("discover", DISCOVER_EVERY, self._discover),
            Loop("pace", PACE_EVERY, self._pace),
            Loop("sampler", 1.0, self._sample),
        ]
        for loop in self.loops:
            loop.start()

    def _discover(self) -> None:
        from inventory.services import scheduling

        scheduling.connector_discover(connector=self.live_connector)

    def _pace(self) -> None:
        from inventory.services import dispatch, freshness

        dispatch.batches_dispatch_due()
        freshness.backfills_pace_step()

    def _sample(self) -> None:
        from inventory.selectors_freshness import jobs_freshness

        (row,) = jobs_freshness([self.live_job])
        with self.lock:
            self.samples.append(Sample(time.time(), row.seconds_behind, row.used))

    def stop(self) -> None:
        for loop in self.loops:
            loop.stop()
        if self.worker is not None:
            stop_worker(self.worker)

    def errors(self) -> list[str]:
        return [f"{loop.name}: {e}" for loop in self.loops for e in loop.errors]

    def samples_between(self, start: float, end: float) -> list[Sample]:
        with self.lock:
            return [s for s in self.samples if start <= s.at <= end]

    # ---- the arms -------------------------------------------------------------------------------

    def settle(self) -> float:
        """Wait until the live job is near its watermark (within a quarter of its target for 5
        samples in a row); returns the seconds waited."""
        started = time.time()
        while time.time() - started < SETTLE_LIMIT_SECONDS:
            time.sleep(1)
            recent = self.samples_between(time.time() - 5.5, time.time())
            if len(recent) >= 5 and all(
                (s.seconds_behind or 0) <= TARGET_SECONDS / 4 for s in recent
            ):
                break
        return time.time() - started

    def configure(self, mode: str, fixed_rate: int | None) -> None:
        from inventory.models import FreshnessThrottle
        from inventory.services.freshness import throttle_control_configure
        from inventory.services.throttle import throttle_set

        throttle_control_configure(enabled=False, actor="bench")
        throttle_set(connector=None, weight_per_minute=fixed_rate if mode == "fixed" else None)
        if mode == "adaptive":
            # a fresh controller: no limit, no reference pace, its next step due at once
            FreshnessThrottle.objects.filter(id=1).update(
                rate=None, concurrency=None, reference_rate=None, stepped_at=None
            )
            throttle_control_configure(enabled=True, actor="bench")

    def run_arm(
        self, name: str, mode: str, fixed_rate: int | None = None, *, history: str | None = None
    ) -> ArmResult:
        from inventory.models import Backfill, BackfillStatus, Batch, ThrottleDecision
        from inventory.services.backfills import backfill_create

        job, first, last, heaviest = self.history[history or mode]
        self.configure(mode, fixed_rate)
        self.settle()
        decided = ThrottleDecision.objects.order_by("-id").values_list("id", flat=True).first()
        load_start = os.getloadavg()[0]
        started = time.time()
        backfill = backfill_create(
            job=job,
            range_start=first,
            range_end=last,
            batch_weight=heaviest * BACKFILL_MAX_ITEMS,
            max_items=BACKFILL_MAX_ITEMS,
            max_concurrency=BACKFILL_CONCURRENCY,
            reason=f"bench arm {mode}",
        )
        while True:
            time.sleep(1)
            status = Backfill.objects.values_list("status", flat=True).get(pk=backfill.pk)
            if status == BackfillStatus.COMPLETED:
                break
            if status != BackfillStatus.RUNNING:
                raise RuntimeError(f"the backfill of arm {mode} is {status}")
            if time.time() - started > ARM_LIMIT_SECONDS:
                raise RuntimeError(f"the backfill of arm {mode} ran over {ARM_LIMIT_SECONDS} s")
            errors = self.errors()
            if errors:
                raise RuntimeError(f"arm {mode}: {errors[:3]}")
        ended = max(
            Batch.objects.filter(backfill=backfill).values_list("finished_at", flat=True)
        ).timestamp()
        batches = Batch.objects.filter(backfill=backfill)
        weight = sum(b.weight for b in batches)
        decisions = list(
            ThrottleDecision.objects.filter(id__gt=decided or 0)
            .exclude(reason__contains="by bench")
            .order_by("id")
            .values_list("at", "reason")
        )
        result = ArmResult(
            name=name,
            mode=mode,
            seconds=ended - started,
            files=last - first + 1,
            weight=weight,
            samples=self.samples_between(started, ended),
            decisions=[(at.timestamp() - started, reason) for at, reason in decisions],
            fixed_rate=fixed_rate,
            load=(round(load_start, 1), round(os.getloadavg()[0], 1)),
        )
        print(
            f"{name}: {result.seconds:.0f} s, inside {100 * result.inside:.1f}%, "
            f"p95 behind {result.behind(0.95)} s, {len(result.decisions)} decisions",
            flush=True,
        )
        return result


def measure() -> dict:
    """The three arms in one run on one worker: static priority first (its pace sets the fixed
    throttle's budget), then the controller (close in time to the arm it is compared with), then
    the fixed throttle."""
    with common.worker_database(DB_NAME, prefix="tidemark-bench-freshness-") as (work, env, queue):
        bench = Bench(work, env, queue)
        try:
            for mode in ("static", "adaptive", "fixed"):
                bench.history_prepare(mode)
            bench.history_prepare("warmup", WARMUP_BACKFILL_FILES)
            bench.start()
            warm_start = time.time()
            time.sleep(WARMUP_SECONDS)  # the live job alone: the JVM warms, and its baseline
            alone = ArmResult(
                "live job alone", "alone", samples=bench.samples_between(warm_start, time.time())
            )
            bench.run_arm("warm-up backfill (not counted)", "static", history="warmup")
            static = bench.run_arm("static priority (no throttle)", "static")
            pace = static.weight / static.seconds * 60  # weight per minute, unthrottled
            adaptive = bench.run_arm("adaptive (freshness controller)", "adaptive")
            fixed = bench.run_arm(
                "fixed throttle (half the unthrottled pace)", "fixed", int(pace / 2)
            )
        except Exception:
            log = (work / "worker.log").read_text(errors="replace")[-4000:]
            print(f"worker log (end):\n{log}", flush=True)
            raise
        finally:
            bench.stop()
    return figures(alone, [adaptive, static, fixed], static)


def figures(alone: ArmResult, arms: list[ArmResult], static: ArmResult) -> dict:
    behind_alone = [s.seconds_behind or 0 for s in alone.samples]
    found = {
        "settings": {
            "slots": SLOTS,
            "rows_per_file": ROWS,
            "live_files_per_s": LIVE_FILES_PER_S,
            "live_max_items": LIVE_MAX_ITEMS,
            "target_seconds": TARGET_SECONDS,
            "backfill_files": BACKFILL_FILES,
            "backfill_max_items": BACKFILL_MAX_ITEMS,
            "backfill_concurrency": BACKFILL_CONCURRENCY,
            "warmup_backfill_files": WARMUP_BACKFILL_FILES,
        },
        "alone": {
            "inside_target": round(alone.inside, 4),
            "p95_behind_s": alone.behind(0.95),
            "median_behind_s": statistics.median(behind_alone) if behind_alone else None,
        },
    }
    for arm in arms:
        found[arm.mode] = {
            "name": arm.name,
            "inside_target": round(arm.inside, 4),
            "backfill_speed_ratio": round(static.seconds / arm.seconds, 4),
            "backfill_seconds": round(arm.seconds, 1),
            "files_per_s": round(arm.files / arm.seconds, 2),
            "weight": arm.weight,
            "p50_behind_s": arm.behind(0.5),
            "p95_behind_s": arm.behind(0.95),
            "max_behind_s": arm.behind(1.0),
            "samples": len(arm.samples),
            "decisions": len(arm.decisions),
            "decision_log": [(round(t, 1), r) for t, r in arm.decisions[:40]],
            "fixed_rate": arm.fixed_rate,
            "load": arm.load,
            "behind_series": [s.seconds_behind for s in arm.samples],
        }
    return found
