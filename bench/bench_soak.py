"""Soak: many small batches through real Celery workers while faults are injected, then a
total-queue check in the style of Jepsen's: every source item must appear in the sink exactly once.

    python bench/bench_soak.py --batches 10000 --faults 100    # the issue's figures (the default)
    BENCH_QUICK=1 python bench/bench_soak.py                   # 1,000 batches, 30 faults

Real parts: PostgreSQL (a database of its own on the settings' server), Redis, Celery prefork
workers running `tidemark.run_job` (start, heartbeat, fenced commit, reaper, retries, follow-up
planning). Light part: the executor (bench/soak_hooks.py) writes each batch's items as one file,
staged and renamed over the batch's previous output, instead of running Spark, so thousands of
batches fit in minutes.

Faults, spread over the run:
- sigkill: the pool process running a batch is killed (SIGKILL); its lease runs out and the
  reaper hands the batch to a new attempt;
- crash_before_commit: a pool process dies after its sink write and before its commit
  (probability --crash-p per commit, decided in the worker);
- zombie: a whole worker is stopped (SIGSTOP) past its lease, then continued (SIGCONT): its
  batches were reaped and run elsewhere, its late commits must be refused;
- duplicate: a running batch's task is sent again (what a broker redelivery hands a worker).

The checker reads every output file: lost = source items never written, unexpected = written
items that are not source items, duplicated = items written more than once. All must be empty.
It also checks that the job's succeeded batches tile its items with no gap or overlap.
"""

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bench_worker import _database_url, stop_worker  # noqa: E402

DB_NAME = os.environ.get("BENCH_SOAK_DB_NAME", "tidemark_bench_soak")
LEASE_SECONDS = 3


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1_000 if common.QUICK else 10_000)
    parser.add_argument("--items-per-batch", type=int, default=2)
    parser.add_argument("--faults", type=int, default=30 if common.QUICK else 100)
    parser.add_argument("--crash-p", type=float, default=0.003)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=8, help="the job's max_concurrency")
    parser.add_argument("--work-seconds", type=float, default=0.02)
    parser.add_argument("--timeout", type=float, default=3600)
    return parser.parse_args(argv)


def start_worker(env: dict, queue: str, log: Path, concurrency: int):
    import subprocess

    out = open(log, "wb")  # noqa: SIM115 - held by the child
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "--pool=prefork",
            f"--concurrency={concurrency}",
            "-Q",
            queue,
            "-n",
            f"soak-{uuid.uuid4().hex[:6]}@%h",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "--loglevel=WARNING",
        ],
        cwd=common.ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out.close()
    return proc


def _parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class Faults:
    """Injects the driver-side faults, round robin, one every `every` seconds, and counts them."""

    KINDS = ("sigkill", "duplicate", "zombie")

    def __init__(self, *, workers, job, total: int, every: float):
        self.workers, self.job, self.total, self.every = workers, job, total, every
        self.counts = Counter()
        self.next_at = time.monotonic() + every
        self.frozen: dict[int, threading.Timer] = {}  # worker main pid -> its SIGCONT
        self.turn = 0

    def step(self) -> None:
        now = time.monotonic()
        if sum(self.counts.values()) >= self.total or now < self.next_at:
            return
        kind = self.KINDS[self.turn % len(self.KINDS)]
        if self._inject(kind):
            self.counts[kind] += 1
            self.turn += 1
            self.next_at = now + self.every

    def _running(self):
        from inventory.models import Batch, BatchStatus

        return (
            Batch.objects.filter(job=self.job, status=BatchStatus.RUNNING)
            .order_by("?")
            .values_list("id", "worker")
            .first()
        )

    def _inject(self, kind: str) -> bool:
        running = self._running()
        if running is None:
            return False
        batch_id, worker = running
        mains = {w.pid for w in self.workers}
        if kind == "sigkill":
            pid = int(worker.rsplit(":", 1)[1])
            if _parent_pid(pid) not in mains:  # only processes this benchmark started
                return False
            os.kill(pid, signal.SIGKILL)
            return True
        if kind == "duplicate":
            from inventory.services import dispatch

            dispatch.nudge(self.job.pk)  # a redelivered nudge
            return True
        # zombie: a whole worker past its lease (never both at once: someone must do the work)
        candidates = [w.pid for w in self.workers if w.pid not in self.frozen]
        if len(candidates) < 2 and len(self.workers) > 1:
            return False
        pid = random.choice(candidates)
        os.killpg(pid, signal.SIGSTOP)
        # continued by a timer, not by this loop: a process frozen inside a transaction holds its
        # row locks, and this loop's own queries may wait for them until it is continued
        timer = threading.Timer(LEASE_SECONDS + 2, self._thaw, args=(pid,))
        timer.daemon = True
        self.frozen[pid] = timer
        timer.start()
        return True

    def _thaw(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.frozen.pop(pid, None)

    def release(self) -> None:
        for pid, timer in list(self.frozen.items()):
            timer.cancel()
            self._thaw(pid)


def setup_job(work: Path, args):
    from inventory.models import Asset
    from inventory.services.connectors import connector_create
    from inventory.services.jobs import job_create

    landing = work / "landing"
    landing.mkdir()
    connector = connector_create(name="soak-src", kind="files", config={"path": str(landing)})
    items = args.batches * args.items_per_batch
    Asset.objects.bulk_create(
        Asset(connector=connector, location=f"item-{n:07d}", weight=1) for n in range(items)
    )
    job = job_create(
        name="soak",
        connector=connector,
        batch_weight=10**12,
        max_items=args.items_per_batch,
        sink={"kind": "files", "path": str(work / "sink")},
        lease_seconds=LEASE_SECONDS,
        retry_backoff_seconds=0,
        max_attempts=50,
        max_concurrency=args.in_flight,
    )
    return job, {f"item-{n:07d}" for n in range(items)}


def check(sink: Path, expected: set[str], job) -> dict:
    from inventory.models import Batch, BatchStatus, Watermark

    written = Counter()
    stale_outputs = 0
    attempts = dict(
        Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).values_list("id", "attempt")
    )
    for path in sink.glob("batch-*.json"):
        output = json.loads(path.read_text())
        written.update(output["items"])
        if attempts.get(output["batch"]) != output["attempt"]:
            stale_outputs += 1
    spans = sorted(
        (b.span.lower, b.span.upper)
        for b in Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED)
    )
    tiling_breaks = sum(1 for (_, hi), (lo, _) in zip(spans, spans[1:], strict=False) if hi != lo)
    return {
        "lost": sorted(expected - set(written)),
        "unexpected": sorted(set(written) - expected),
        "duplicated": sorted(item for item, n in written.items() if n > 1),
        "stale_outputs": stale_outputs,
        "tiling_breaks": tiling_breaks,
        "watermark_at_end": Watermark.objects.get(job=job).position
        == (spans[-1][1] if spans else None),
    }


def soak(args, work: Path, queue: str, env: dict) -> dict:
    from inventory.models import Batch, BatchAttempt, BatchStatus
    from inventory.services import dispatch, scheduling

    job, expected = setup_job(work, args)
    faults_dir = work / "faults"
    faults_dir.mkdir()
    worker_env = {
        **env,
        "SOAK_HOOKS": "1",
        "SOAK_CRASH_P": str(args.crash_p),
        "SOAK_FAULT_DIR": str(faults_dir),
        "SOAK_WORK_SECONDS": str(args.work_seconds),
        "TIDEMARK_PROCESSOR_MODULES": "bench.soak_hooks",
    }
    workers = [
        start_worker(worker_env, queue, work / f"worker-{n}.log", args.concurrency)
        for n in range(args.workers)
    ]
    # spread the driver's faults over the expected run (about 40 batches/s), at least 1 s apart
    faults = Faults(
        workers=workers, job=job, total=args.faults, every=max(args.batches / 40 / args.faults, 1.0)
    )
    started = time.monotonic()
    try:
        time.sleep(3)  # the workers' pool processes start
        while True:
            scheduling.leases_reap()
            dispatch.job_run(job=job)
            faults.step()
            open_batches = Batch.objects.filter(job=job).exclude(status=BatchStatus.SUCCEEDED)
            covered = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).count()
            if covered >= args.batches and not open_batches.exists():
                break
            if time.monotonic() - started > args.timeout:
                raise RuntimeError(f"not done after {args.timeout:.0f} s: {covered} batches")
            time.sleep(0.5)
        elapsed = time.monotonic() - started
    finally:
        faults.release()
        for proc in workers:
            stop_worker(proc)
    counts = dict(faults.counts)
    counts["crash_before_commit"] = len(list(faults_dir.glob("crash_before_commit-*")))
    verdict = check(work / "sink", expected, job)
    attempts = BatchAttempt.objects.filter(batch__job=job)
    return {
        "batches": Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).count(),
        "items": len(expected),
        "attempts": attempts.count(),
        "failed_attempts": attempts.filter(outcome="failed").count(),
        "faults": counts,
        "seconds": round(elapsed, 1),
        "workers": args.workers,
        "concurrency": args.concurrency,
        "lost": len(verdict["lost"]),
        "unexpected": len(verdict["unexpected"]),
        "duplicated": len(verdict["duplicated"]),
        "examples": {k: verdict[k][:10] for k in ("lost", "unexpected", "duplicated")},
        "stale_outputs": verdict["stale_outputs"],
        "tiling_breaks": verdict["tiling_breaks"],
        "watermark_at_end": verdict["watermark_at_end"],
    }


def write(f: dict, args) -> None:
    ok = f["lost"] == f["unexpected"] == f["duplicated"] == f["tiling_breaks"] == 0
    faults = ", ".join(f"{kind} {n}" for kind, n in sorted(f["faults"].items()))
    rows = [
        ["batches committed", f"{f['batches']:,} ({f['items']:,} items)"],
        ["attempts (failed)", f"{f['attempts']:,} ({f['failed_attempts']:,})"],
        ["faults injected", f"{sum(f['faults'].values())}: {faults}"],
        [
            "lost / unexpected / duplicated items",
            f"{f['lost']} / {f['unexpected']} / {f['duplicated']}",
        ],
        ["gaps or overlaps between committed batches", f["tiling_breaks"]],
        ["outputs not from the committed attempt", f["stale_outputs"]],
        ["time", f"{f['seconds']:.0f} s ({f['workers']} workers x {f['concurrency']} processes)"],
    ]
    markdown = "\n".join(
        [
            "## soak",
            "",
            f"{common.now_utc()}. `bench/bench_soak.py --batches {args.batches} --faults "
            f"{args.faults}`: real workers, light executor (no Spark), leases of {LEASE_SECONDS} s. "
            + ("Checker: **pass**." if ok else "Checker: **FAIL**."),
            "",
            common.table(["", ""], rows),
        ]
    )
    common.write_section("soak", markdown, f)


def main(argv) -> int:
    args = parse_args(argv)
    base = common.base_database()
    common.recreate_database(base, DB_NAME)
    queue = f"tidemark-soak-{uuid.uuid4().hex[:8]}"
    os.environ["DATABASE_URL"] = _database_url(base, DB_NAME)
    os.environ["CELERY_QUEUE"] = queue
    import django
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = DB_NAME
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from controlplane.celery import app

    app.conf.CELERY_TASK_DEFAULT_QUEUE = queue
    if connection.settings_dict["NAME"] != DB_NAME:
        raise RuntimeError(f"refusing to run on {connection.settings_dict['NAME']!r}")
    call_command("migrate", verbosity=0)
    work = Path(tempfile.mkdtemp(prefix="tidemark-soak-"))
    env = {**os.environ, "REDIS_URL": settings.REDIS_URL, "TIDEMARK_DEV": "1"}
    try:
        figures = soak(args, work, queue, env)
    finally:
        if os.environ.get("BENCH_KEEP") != "1":
            import shutil

            from django.db import connections

            shutil.rmtree(work, ignore_errors=True)
            connections.close_all()
            common.drop_database(base, DB_NAME)
    write(figures, args)
    print(json.dumps({k: v for k, v in figures.items() if k != "examples"}, indent=1))
    ok = figures["lost"] == figures["unexpected"] == figures["duplicated"] == 0
    return 0 if ok and figures["tiling_breaks"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
