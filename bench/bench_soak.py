"""Soak: the product under faults, then a checker that cannot pass a wrong run.

    make soak                                   # the large run (SOAK_FILES=2000: 10,000 batches)
    .venv/bin/pytest -m soak tests/soak/test_small_soak.py # the small one (SOAK_FILES=40: 200 batches)
    python bench/bench_soak.py --files 2000     # the same as `make soak`

Real parts, all of them: units land in each source while the real discovery of its kind
registers them (bench/soak_sources.py): Parquet files renamed into a directory, Parquet objects
put into a bucket of the S3 test server, rows inserted into a table of another PostgreSQL
database, messages produced to a topic of the Kafka test broker. Jobs read those connectors, one
batch per item, through real Celery prefork workers running real PySpark (warm sessions): the
files source feeds one job per sink kind (files (JSON), Delta, PostgreSQL `append`, `upsert` and
`coalesce`), each other source at least one. Every fourth unit updates keys of an earlier one (new
value, and a null `note` on odd rows: a partial update that coalesce must not blank). A real
`celery beat` runs the reaper, retry requeue and pacing; the driver lands units, runs discovery,
plans and injects faults (without `beat_env` it runs beat's steps itself).

Faults, while files land and batches run (bench/soak_faults.py, each counted only when it landed):
sigkill and sigstop of workers, a real broker redelivery, Redis and PostgreSQL restarts (the
embedded ones), a full disk under the files sink (a tmpfs), a worker's wall clock jumping
(libfaketime), beat killed and started again, the gunicorn worker serving the REST API killed or
stopped while the driver asks it for backfills over committed ranges (bench/soak_web.py); and
crash_before_commit (the chaos suite's hook, once per job). Meanwhile, through the same gunicorn,
an admin replays every job (its watermark moved back with replay=true) and an operator backfills
each job of the S3, table and Kafka sources (bench/soak_asks.py); the run is not done until each
of them was answered 200/201 and the replayed and backfilled items committed again.

Then bench/soak_checker.py reads each sink as a reader would and compares it with every source
row's checksum: lost, duplicated, unexpected, altered, stale; and each job's watermark with its
contiguous committed prefix (for the Kafka job, its per-partition offsets too). Any of them fails
the run.
"""

import argparse
import os
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
from bench import soak_sources as ss  # noqa: E402
from bench.soak_asks import Asks  # noqa: E402
from bench.soak_faults import FAULT_KINDS, Faults, Pool  # noqa: E402
from bench.soak_machine import (  # noqa: E402
    Beat,
    redeliveries_seen,
    tmpfs_mount,
    tmpfs_unmount,
)
from bench.soak_web import Web, WebFaults, operator_token, role_token  # noqa: E402

MODES = ("files", "delta", "iceberg", "append", "upsert", "coalesce")
# the sinks a reader can read at each of their versions (checked at every one)
VERSIONED = ("delta", "iceberg")
__all__ = ["FAULT_KINDS", "Settings", "Run", "soak"]
PROCESSOR_MODULES = "tests.support.worker_processors,tests.chaos.processors,bench.soak_processors"


@dataclass
class Settings:
    files: int = 40
    rows: int = 4
    workers: int = 2
    lease_seconds: int = 10  # heartbeats on a machine at load 20 still hold it
    visibility_timeout: int = 12
    faults_per_kind: int = 2
    timeout: float = 3600
    every: int = 4  # the sources other than files land one unit every `every` files


@dataclass
class Run:
    """What happened, as measured."""

    faults: Counter = field(default_factory=Counter)
    gave_up: Counter = field(default_factory=Counter)  # injected, never seen landing
    not_possible: dict = field(default_factory=dict)  # kind -> why it cannot land here
    redeliveries_seen: int = 0
    # discovery looks that failed with an error (the next loop looks again, as beat's next step)
    discovery_failures: Counter = field(default_factory=Counter)
    backfills_asked: int = 0  # through the REST API (bench/soak_web.py)
    backfills_created: int = 0
    asks: dict = field(default_factory=dict)  # replays and source backfills (bench/soak_asks.py)
    events: list = field(default_factory=list)  # (time.monotonic(), what): faults and asks
    seconds: float = 0.0


# ---- setup --------------------------------------------------------------------------------------


def setup(work: Path, sources, *, sink_env: str, tag: str, lease_seconds: int):
    """Each source's connector and one job per sink mode it feeds: ({label: job}, {label: source});
    the files source's jobs are labelled by their mode, the others' `<source>-<mode>`."""
    from inventory.services.jobs import job_create

    jobs, source_of = {}, {}
    for source in sources:
        connector = source.setup()
        for mode in source.modes:
            label = mode if source.name == "files" else f"{source.name}-{mode}"
            if mode == "files":
                sink = {"kind": "files", "path": str(work / f"sink-{label}"), "format": "json"}
            elif mode == "delta":
                sink = {"kind": "delta", "path": str(work / f"sink-{label}"), "mode": "append"}
            elif mode == "iceberg":
                sink = {
                    "kind": "iceberg",
                    "catalog_uri": f"sqlite:///{work}/catalog-{label}.db",
                    "warehouse": str(work / f"sink-{label}"),
                    "table": "soak.rows",
                }
            else:
                sink = {
                    "kind": "postgres",
                    "dsn_env": sink_env,
                    "table": f"{tag}_{label}".replace("-", "_"),
                    "mode": mode,
                    **({} if mode == "append" else {"key": ["key"]}),
                }
            source_of[label] = source
            jobs[label] = job_create(
                name=f"{tag}-{label}",
                connector=connector,
                batch_weight=10**12,
                max_items=1,
                watermark_type=source.watermark_type,
                processor=source.processor,
                params={"crash_before_commit": str(work / f"crashed-{label}")},
                sink=sink,
                lease_seconds=lease_seconds,
                retry_backoff_seconds=0,
                max_attempts=20,
                max_concurrency=2,
            )
    return jobs, source_of


def read_sink(label: str, job, source, *, work: Path, sink_dsn: str) -> list:
    """What a reader of the job's sink sees (identity: row_id, or the upserted key)."""
    mode = job.sink["mode"] if job.sink["kind"] == "postgres" else job.sink["kind"]
    identity = "key" if mode in ("upsert", "coalesce") else "row_id"
    if mode == "files":
        return sc.read_json_lines_sink(
            work / f"sink-{label}", identity=identity, content=source.content
        )
    if mode == "delta":
        return sc.read_delta_sink(work / f"sink-{label}", identity=identity, content=source.content)
    if mode == "iceberg":
        return sc.read_iceberg_sink(job.sink, identity=identity, content=source.content)
    return sc.read_postgres_sink(
        sink_dsn, job.sink["table"], identity=identity, content=source.content
    )


def read_versions(label: str, job, source, *, work: Path) -> list:
    """What a reader of each version of the job's Delta or Iceberg sink sees, oldest first."""
    if job.sink["kind"] == "delta":
        return sc.delta_versions(work / f"sink-{label}", content=source.content)
    return sc.iceberg_versions(job.sink, content=source.content)


# ---- faults (bench/soak_faults.py) --------------------------------------------------------------


# ---- the run ------------------------------------------------------------------------------------


def done(jobs, sources) -> bool:
    """Every landed unit is registered, and every job committed all its connector's items."""
    from inventory.models import Asset, Batch, BatchStatus, Watermark

    if not all(source.discovered() for source in sources):
        return False
    for job in jobs.values():
        last = (
            Asset.objects.filter(connector_id=job.connector_id)
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )
        if last is None:
            return False
        # a replay leaves the batches it superseded behind (their items planned again)
        finished = (BatchStatus.SUCCEEDED, BatchStatus.SUPERSEDED)
        if Batch.objects.filter(job=job).exclude(status__in=finished).exists():
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
    sources=None,
    beat_env: dict | None = None,
    progress=None,
):
    """Run the soak over `sources` (bench/soak_sources.py; default: the files source alone,
    feeding every sink kind); returns (Run, Report, figures). With `beat_env`, a real `celery
    beat` runs the reaper, retry requeue and pacing (and is a fault's target); the driver lands
    units, runs discovery and plans, and injects faults."""
    run = Run()
    # the files sink on a small disk of its own, for full_disk
    why = tmpfs_mount(work / "sink-files")
    if why:
        run.not_possible["full_disk"] = why
    try:
        return _soak(work, start_worker, sink_env, tag, settings, sources, beat_env, progress, run)
    finally:
        if not why:
            tmpfs_unmount(work / "sink-files")


def _soak(work, start_worker, sink_env, tag, settings, sources, beat_env, progress, run):
    from inventory.models import Asset, Batch, BatchAttempt, Watermark
    from inventory.services import dispatch, scheduling
    from inventory.services.errors import InvalidInput

    if sources is None:
        sources = [ss.FilesSource(work=work, tag=tag, rows=settings.rows, modes=MODES)]
    jobs, source_of = setup(
        work, sources, sink_env=sink_env, tag=tag, lease_seconds=settings.lease_seconds
    )
    pool = Pool(start_worker, settings.workers, work=work)
    beat = None
    if beat_env is not None:
        (work / "beat").mkdir()
        beat = Beat(env=beat_env, log_dir=work / "beat")
        beat.start()
    web = asks = None
    if beat_env is not None:
        # the REST API, through which the web faults ask for backfills of every job, and an
        # admin for a replay of each job (bench/soak_asks.py)
        web = Web(env=beat_env, log_dir=work / "beat", token=operator_token(f"{tag}-operator"))
        web.start()
        web_faults = WebFaults(web, jobs.values())
        asks = Asks(
            web,
            jobs,
            admin_token=role_token(f"{tag}-admin", "admin"),
            events=run.events,
            backfill_labels=[label for label, s in source_of.items() if s.name != "files"],
        )
    faults = Faults(
        pool=pool,
        jobs=jobs,
        settings=settings,
        run=run,
        work=work,
        beat=beat,
        web=web_faults if web is not None else None,
    )
    started = time.monotonic()
    landed = 0
    try:
        while True:
            more = faults.due() or (asks is not None and asks.starved)
            if landed < settings.files or (more and done(jobs, sources)):
                # files land while batches run; when every batch is done before every fault has
                # landed (faults need a running batch), or a job has too few outputs to replay,
                # one more file gives them one
                for source in sources:
                    source.tick(landed)
                landed += 1
            for source in sources:
                try:
                    source.discover()
                except InvalidInput as exc:  # e.g. a listing without an answer: look again
                    run.discovery_failures[source.name] += 1
                    run.events.append((time.monotonic(), f"discovery of {source.name}: {exc}"))
            if beat is None:
                scheduling.leases_reap()
                dispatch.backfills_pace()
            for job in jobs.values():
                dispatch.job_run(job=job)
            faults.step()
            if asks is not None:
                asks.step()
            owed = asks is not None and asks.due()
            if landed >= settings.files and not faults.due() and not owed and done(jobs, sources):
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
        if web is not None:
            web.stop()
            run.backfills_asked, run.backfills_created = web_faults.asked, web_faults.created
            run.asks = asks.figures()
        for worker in pool.workers:
            worker.stop()
        for source in sources:
            source.close()
    run.faults["crash_before_commit"] = sum(1 for m in jobs if (work / f"crashed-{m}").exists())

    sink_dsn = os.environ[sink_env]
    expected, facts, sinks, versions = {}, {}, {}, {}
    for label, job in jobs.items():
        source = source_of[label]
        mode = job.sink.get("mode") if job.sink["kind"] == "postgres" else job.sink["kind"]
        expected[label] = source.expected(mode)
        watermark = Watermark.objects.get(job=job)
        facts[label] = sc.JobFacts(
            name=job.name,
            start=job.start_position,
            watermark=watermark.position,
            batches=[
                sc.BatchFact(
                    b.id,
                    b.span.lower,
                    b.span.upper,
                    b.status,
                    b.attempt,
                    b.replaced_by_id,
                    b.published_attempt is not None,
                )
                for b in Batch.objects.filter(job=job)
            ],
            value=watermark.value if source.watermark_type == "key_value" else None,
            item_values=source.item_values(),
        )
        sinks[label] = (label, read_sink(label, job, source, work=work, sink_dsn=sink_dsn))
        if job.sink["kind"] in VERSIONED:
            versions[label] = read_versions(label, job, source, work=work)
    report = sc.check(sources=expected, jobs=facts, sinks=sinks, versions=versions)
    attempts = BatchAttempt.objects.filter(batch__job__in=jobs.values())
    summary = report.summary()
    figures = {
        # the batches whose output stands (a backfill's rewrite replaces the batches it covered)
        "batches": Batch.objects.filter(
            job__in=jobs.values(), status="succeeded", replaced_by__isnull=True
        ).count(),
        "replaced": Batch.objects.filter(job__in=jobs.values(), replaced_by__isnull=False).count(),
        "superseded": Batch.objects.filter(job__in=jobs.values(), status="superseded").count(),
        "backfills_asked": run.backfills_asked,
        "backfills_created": run.backfills_created,
        **run.asks,
        "files": landed,
        "source_rows": sum(s.landed * s.rows for s in sources),
        "sources": {
            s.name: {
                "units": s.landed,
                "rows": s.landed * s.rows,
                "items": Asset.objects.filter(connector=s.connector).count(),
                "rows_seen": {
                    label: summary["sinks"][label]["rows_seen"]
                    for label in jobs
                    if source_of[label] is s
                },
            }
            for s in sources
        },
        "attempts": attempts.count(),
        "failed_attempts": attempts.filter(outcome="failed").count(),
        "faults": dict(run.faults),
        "gave_up": dict(run.gave_up),
        "not_possible": run.not_possible,
        "redeliveries_seen": run.redeliveries_seen,
        "discovery_failures": dict(run.discovery_failures),
        "seconds": round(run.seconds, 1),
        # when each fault was injected and each replay or backfill asked (s from the start)
        "timeline": [f"{at - started:.0f}s {what}" for at, what in sorted(run.events)],
        "check": summary,
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
    command = [sys.executable, "-m", "pytest", "-m", "soak", "-s", "tests/soak/test_small_soak.py"]
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
