"""Soak: the product under faults, then a checker that cannot pass a wrong run.

    make soak                                   # the large run (SOAK_FILES=2000: 10,000 batches)
    .venv/bin/pytest -m soak tests/test_soak.py # the small one (SOAK_FILES=40: 200 batches)
    python bench/bench_soak.py --files 2000     # the same as `make soak`

Real parts, all of them: Parquet files land in a directory one by one (written aside, renamed in)
while the real discovery (`files.directory_discover`) registers them; five jobs read that connector,
one batch per file, through real Celery prefork workers running real PySpark (warm sessions), into
each sink kind: files (JSON), Delta, PostgreSQL `append`, `upsert` and `coalesce`. Every fourth file
updates keys of an earlier one (new value, and a null `note` on odd rows: a partial update that
coalesce must not blank). A real `celery beat` runs the reaper, retry requeue and pacing; the
driver lands files, runs discovery, plans and injects faults (without `beat_env` it runs beat's
steps itself).

Faults, while files land and batches run (bench/soak_faults.py, each counted only when it landed):
sigkill and sigstop of workers, a real broker redelivery, Redis and PostgreSQL restarts (the
embedded ones), a full disk under the files sink (a tmpfs), a worker's wall clock jumping
(libfaketime), beat killed and started again; and crash_before_commit (the chaos suite's hook,
once per job).

Then bench/soak_checker.py reads each sink as a reader would and compares it with every source
row's checksum: lost, duplicated, unexpected, altered, stale; and each job's watermark with its
contiguous committed prefix. Any of them fails the run.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if not __package__:  # run as a script: `bench` is a folder of the repository root
    sys.path.insert(0, str(ROOT))
from bench import soak_checker as sc  # noqa: E402
from bench.soak_faults import FAULT_KINDS, Faults, Pool  # noqa: E402
from bench.soak_machine import Beat, tmpfs_mount, tmpfs_unmount  # noqa: E402

MODES = ("files", "delta", "append", "upsert", "coalesce")
__all__ = ["FAULT_KINDS", "Settings", "Run", "soak"]
PROCESSOR_MODULES = "tests.worker_processors,tests.chaos.processors,bench.soak_processors"


@dataclass
class Settings:
    files: int = 40
    rows: int = 4
    workers: int = 2
    lease_seconds: int = 10  # heartbeats on a machine at load 20 still hold it
    visibility_timeout: int = 12
    faults_per_kind: int = 2
    timeout: float = 3600


@dataclass
class Run:
    """What happened, as measured."""

    faults: Counter = field(default_factory=Counter)
    gave_up: Counter = field(default_factory=Counter)  # injected, never seen landing
    not_possible: dict = field(default_factory=dict)  # kind -> why it cannot land here
    redeliveries_seen: int = 0
    seconds: float = 0.0


# ---- source -------------------------------------------------------------------------------------


def file_rows(n: int, rows: int) -> list[dict]:
    """The rows of landing file `n`: new keys, or (every fourth file) updates of file n - 3's."""
    updates = n % 4 == 3
    out = []
    for r in range(rows):
        key = f"k{n - 3:05d}-{r}" if updates else f"k{n:05d}-{r}"
        out.append(
            {
                "row_id": f"f{n:05d}-{r}",
                "key": key,
                "value": f"v{n}-{r}",
                "note": None if updates and r % 2 else f"note {n}-{r}",
            }
        )
    return out


def land(landing: Path, n: int, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(
        file_rows(n, rows),
        schema=pa.schema([(c, pa.string()) for c in ("row_id", "key", "value", "note")]),
    )
    aside = landing / f".f-{n:05d}.parquet.tmp"  # discovery skips names starting with "."
    pq.write_table(table, aside)
    os.rename(aside, landing / f"f-{n:05d}.parquet")


def expected_rows(mode: str, files: int, rows: int, asset_of: dict[int, int]) -> list:
    """What a reader of a `mode` sink must see: each source row (files, append), or per key the
    latest version (upsert) or the latest non-null value of each column (coalesce)."""
    if mode in ("files", "delta", "append"):
        return [
            sc.SourceRow(r["row_id"], sc.checksum(*r.values()), asset_of[n])
            for n in range(files)
            for r in file_rows(n, rows)
        ]
    merged: dict[str, tuple[dict, int]] = {}
    for n in range(files):
        for r in file_rows(n, rows):
            before = merged.get(r["key"], ({}, 0))[0]
            if mode == "coalesce":
                r = {c: (v if v is not None else before.get(c)) for c, v in r.items()}
            merged[r["key"]] = (r, asset_of[n])
    return [sc.SourceRow(k, sc.checksum(*r.values()), item) for k, (r, item) in merged.items()]


# ---- setup --------------------------------------------------------------------------------------


def setup(work: Path, *, sink_env: str, tag: str, lease_seconds: int):
    """A files connector over `work/landing` and one job per sink kind."""
    from inventory.services.connectors import connector_create
    from inventory.services.jobs import job_create

    landing = work / "landing"
    landing.mkdir(parents=True)
    connector = connector_create(name=f"{tag}-src", kind="files", config={"path": str(landing)})
    jobs = {}
    for mode in MODES:
        if mode == "files":
            sink = {"kind": "files", "path": str(work / "sink-files"), "format": "json"}
        elif mode == "delta":
            sink = {"kind": "delta", "path": str(work / "sink-delta"), "mode": "append"}
        else:
            sink = {
                "kind": "postgres",
                "dsn_env": sink_env,
                "table": f"{tag}_{mode}",
                "mode": mode,
                **({} if mode == "append" else {"key": ["key"]}),
            }
        jobs[mode] = job_create(
            name=f"{tag}-{mode}",
            connector=connector,
            batch_weight=10**12,
            max_items=1,
            processor="soak_tag",
            params={"crash_before_commit": str(work / f"crashed-{mode}")},
            sink=sink,
            lease_seconds=lease_seconds,
            retry_backoff_seconds=0,
            max_attempts=20,
            max_concurrency=2,
        )
    return connector, jobs, landing


# ---- faults (bench/soak_faults.py) --------------------------------------------------------------


RECEIVED = re.compile(r"Task tidemark\.run_job\[([0-9a-f-]+)\] received")


def redeliveries_seen(logs: list[str]) -> int:
    """Task ids received by more than one worker: a message the broker delivered again."""
    seen = Counter()
    for log in logs:
        seen.update(set(RECEIVED.findall(log)))
    return sum(1 for n in seen.values() if n > 1)


# ---- the run ------------------------------------------------------------------------------------


def done(jobs, connector, files: int) -> bool:
    from inventory.models import Asset, Batch, BatchStatus, Watermark

    if Asset.objects.filter(connector=connector).count() < files:
        return False
    last = Asset.objects.filter(connector=connector).order_by("-id").values_list("id", flat=True)[0]
    for job in jobs.values():
        if Batch.objects.filter(job=job).exclude(status=BatchStatus.SUCCEEDED).exists():
            return False
        if Watermark.objects.get(job=job).position != last + 1:
            return False
    return True


def soak(
    *,
    work: Path,
    start_worker,
    sink_env: str,
    tag: str,
    settings: Settings,
    beat_env: dict | None = None,
    progress=None,
):
    """Run the soak; returns (Run, Report, figures). With `beat_env`, a real `celery beat` runs
    the reaper, retry requeue and pacing (and is a fault's target); the driver lands files, runs
    discovery and plans, and injects faults."""
    run = Run()
    # the files sink on a small disk of its own, for full_disk
    why = tmpfs_mount(work / "sink-files")
    if why:
        run.not_possible["full_disk"] = why
    try:
        return _soak(work, start_worker, sink_env, tag, settings, beat_env, progress, run)
    finally:
        if not why:
            tmpfs_unmount(work / "sink-files")


def _soak(work, start_worker, sink_env, tag, settings, beat_env, progress, run):
    from inventory.models import Asset, Batch, BatchAttempt, Watermark
    from inventory.services import dispatch, scheduling
    from inventory.sources.files import directory_discover

    connector, jobs, landing = setup(
        work, sink_env=sink_env, tag=tag, lease_seconds=settings.lease_seconds
    )
    pool = Pool(start_worker, settings.workers, work=work)
    beat = None
    if beat_env is not None:
        (work / "beat").mkdir()
        beat = Beat(env=beat_env, log_dir=work / "beat")
        beat.start()
    faults = Faults(pool=pool, jobs=jobs, settings=settings, run=run, work=work, beat=beat)
    started = time.monotonic()
    landed = 0
    try:
        while True:
            if landed < settings.files or (faults.due() and done(jobs, connector, landed)):
                # files land while batches run; when every batch is done before every fault has
                # landed (faults need a running batch), one more file gives them one
                land(landing, landed, settings.rows)
                landed += 1
            directory_discover(connector=connector)
            if beat is None:
                scheduling.leases_reap()
                dispatch.backfills_pace()
            for job in jobs.values():
                dispatch.job_run(job=job)
            faults.step()
            if landed >= settings.files and not faults.due() and done(jobs, connector, landed):
                break
            if time.monotonic() - started > settings.timeout:
                raise RuntimeError(f"soak not done after {settings.timeout:.0f} s")
            if progress is not None:
                progress()
            time.sleep(0.3)
        run.seconds = time.monotonic() - started
    finally:
        faults.release()
        run.redeliveries_seen = redeliveries_seen(pool.logs())
        if beat is not None:
            beat.stop()
        for worker in pool.workers:
            worker.stop()
    run.faults["crash_before_commit"] = sum(1 for m in MODES if (work / f"crashed-{m}").exists())

    asset_of = {
        int(location.rsplit("f-", 1)[1].split(".")[0]): pk
        for pk, location in Asset.objects.filter(connector=connector).values_list("id", "location")
    }
    sink_dsn = os.environ[sink_env]
    sources, facts, sinks = {}, {}, {}
    for mode, job in jobs.items():
        sources[mode] = expected_rows(mode, landed, settings.rows, asset_of)
        facts[mode] = sc.JobFacts(
            name=job.name,
            start=job.start_position,
            watermark=Watermark.objects.get(job=job).position,
            batches=[
                sc.BatchFact(b.id, b.span.lower, b.span.upper, b.status, b.attempt)
                for b in Batch.objects.filter(job=job)
            ],
        )
        if mode == "files":
            rows = sc.read_json_lines_sink(work / "sink-files", identity="row_id")
        elif mode == "delta":
            rows = sc.read_delta_sink(work / "sink-delta", identity="row_id")
        else:
            identity = "row_id" if mode == "append" else "key"
            rows = sc.read_postgres_sink(sink_dsn, f"{tag}_{mode}", identity=identity)
        sinks[mode] = (mode, rows)
    report = sc.check(sources=sources, jobs=facts, sinks=sinks)
    attempts = BatchAttempt.objects.filter(batch__job__in=jobs.values())
    figures = {
        "batches": Batch.objects.filter(job__in=jobs.values(), status="succeeded").count(),
        "files": landed,
        "source_rows": landed * settings.rows,
        "attempts": attempts.count(),
        "failed_attempts": attempts.filter(outcome="failed").count(),
        "faults": dict(run.faults),
        "gave_up": dict(run.gave_up),
        "not_possible": run.not_possible,
        "redeliveries_seen": run.redeliveries_seen,
        "seconds": round(run.seconds, 1),
        "check": report.summary(),
    }
    return run, report, figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000, help="batches = 5 x files")
    parser.add_argument("--faults-per-kind", type=int, default=80)
    args = parser.parse_args(argv)
    env = {
        **os.environ,
        "SOAK_FILES": str(args.files),
        "SOAK_FAULTS_PER_KIND": str(args.faults_per_kind),
    }
    command = [sys.executable, "-m", "pytest", "-m", "soak", "-s", "tests/test_soak.py"]
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
