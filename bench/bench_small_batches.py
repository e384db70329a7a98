"""Benchmark: the Spark side of one small batch per source and sink kind, against bare Spark.

The shape: every batch is ONE item of 4 rows `(id bigint, name text, amount int)`, as the soak's
(bench/soak_sources.py) are: one Parquet object of 4 rows in an S3 bucket (moto's server in this
process, real HTTP on loopback), or one slice of 4 rows of a PostgreSQL table read by its id
column. Paths measured (`workers.spark.run.run_batch`, the code the worker's warm executor runs,
with the worker's session defaults, `local[*]`, in this process; the publish fence is the static
one, so the control plane's acquire, fence transaction and commit are not in these figures:
bench_batches.py measures those):

- object store (Parquet) -> PostgreSQL `upsert`, `append`, `coalesce`;
- table -> PostgreSQL `append`, `upsert`;
- object store -> Delta (local directory);

against the bare Spark read + write of the same 4 rows in the same session: the object read with
pyarrow on the driver (or the slice with one psycopg2 query) into a one-partition
`createDataFrame`, written by one `foreachPartition` COPY straight into a table (Delta:
`write.parquet` of the same rows). The two alternate within each round, a new object or slice
each time, after WARMUP rounds of both.
Per step (seconds, medians): `read` (the reader builds its DataFrame: planning, schema),
`write` (the sink), `profile` (the input's row count and watermark after the write); and the
Spark jobs each batch started (the bare side starts one).

Also in the same rounds, `before`: the same batch as it ran before commit d922c51 (the PostgreSQL
sink's observed metrics ignored: the 0.5 s wait and the second read of the input).

BENCH_QUICK=1 runs fewer rounds; BENCH_ROUNDS sets them; BENCH_CASES (comma-separated parts of
the names below) runs only some paths. Writes the section `small_batches` of docs/benchmarks.md.

BENCH_IDLE_SECONDS=N (70: past Spark's one idle minute, after which it closes its Python workers)
measures the batch that follows a quiet spell instead: each measured batch, Tidemark's and bare's
alike, comes N seconds after the one before, so both start new Python workers; the `before`
variant is left out, and the figures go to the section `small_batches_idle`.
"""

import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from small_batches_data import (  # noqa: E402
    DSN_ENV,
    KEY_ENV,
    ROWS,
    SECRET_ENV,
    Data,
    bare_copy,
    bare_object,
    bare_table,
)

DB_NAME = "tidemark_bench_small"
WARMUP = int(os.environ.get("BENCH_WARMUP") or (3 if common.QUICK else 6))
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or (6 if common.QUICK else 20))
TARGET_MS = 100
IDLE_SECONDS = float(os.environ.get("BENCH_IDLE_SECONDS") or 0)


class Steps:
    """Per-step wall time of run_batch's parts, by wrapping the functions it calls."""

    def __init__(self):
        self.current: dict = {}
        self.ignore_observed = False
        from workers.spark import input_profile, run

        real_result = input_profile.InputProfile.result

        def result(profile, out, observed=None):
            return real_result(profile, out, None if self.ignore_observed else observed)

        input_profile.InputProfile.result = result

        def timed(owner, name, step):
            real = getattr(owner, name)

            def call(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return real(*args, **kwargs)
                finally:
                    self.current[step] = self.current.get(step, 0.0) + (
                        time.perf_counter() - started
                    )

            setattr(owner, name, call)

        timed(run, "read_source", "read")
        timed(run, "write_sink", "write")
        timed(input_profile.InputProfile, "result", "profile")


def _jobs(spark, call):
    group = f"bench-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "small batch")
    try:
        started = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - started
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return result, seconds, len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def measure() -> dict:
    from workers.spark.run import run_batch
    from workers.spark.session import get_session

    base = common.base_database()
    common.recreate_database(base, DB_NAME)
    params = common.psycopg2_params(base, DB_NAME)
    dsn = " ".join(f"{key}='{value}'" for key, value in params.items() if value is not None)
    os.environ[DSN_ENV] = dsn
    os.environ.setdefault(KEY_ENV, "small-key")
    os.environ.setdefault(SECRET_ENV, "small-secret")
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    from controlplane.loopback import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-small-"))
    from django.conf import settings

    # the worker's session: its defaults and the deployment's SPARK_CONF (as a worker starts it)
    spark = get_session(master="local[*]", conf=settings.SPARK_CONF)
    steps = Steps()
    data = Data(f"http://127.0.0.1:{port}", dsn, work)
    with data.conn.cursor() as cur:
        cur.execute("CREATE TABLE bare_out (id bigint, name text, amount int)")

    def pg(mode: str, table: str) -> dict:
        # append: no key (so no primary key): the `before` batch appends the same rows again
        key = [] if mode == "append" else ["id"]
        return {"kind": "postgres", "dsn_env": DSN_ENV, "table": table, "key": key, "mode": mode}

    cases = {
        "object store -> postgres upsert": ("object", lambda: pg("upsert", "out_upsert")),
        "object store -> postgres append": ("object", lambda: pg("append", "out_append")),
        "object store -> postgres coalesce": ("object", lambda: pg("coalesce", "out_coalesce")),
        "table -> postgres append": ("table", lambda: pg("append", "tout_append")),
        "table -> postgres upsert": ("table", lambda: pg("upsert", "tout_upsert")),
        "object store -> delta": (
            "object",
            lambda: {"kind": "delta", "path": str(work / "delta")},
        ),
    }
    chosen = [c.strip() for c in os.environ.get("BENCH_CASES", "").split(",") if c.strip()]
    if chosen:
        cases = {name: case for name, case in cases.items() if any(c in name for c in chosen)}
    loads = [os.getloadavg()[0]]
    figures = {}
    try:
        for name, (kind, sink_of) in cases.items():
            tidemark, bare, jobs, bare_jobs, step_rows = [], [], [], [], []
            olds, old_jobs = [], []
            for n in range(WARMUP + ROUNDS):
                sink = sink_of()
                if kind == "object":
                    source, location = data.object_source()
                    bare_read = bare_object
                    what = location
                else:
                    source, what = data.table_source()
                    bare_read = bare_table
                spec = data.spec(source, sink)
                before_spec = {**spec, "batch_id": spec["batch_id"] + 100_000}
                if sink["kind"] == "delta":

                    def bare_write(df):
                        df.write.parquet(str(work / "bare" / uuid.uuid4().hex))

                else:

                    def bare_write(df):
                        df.foreachPartition(bare_copy(dsn, "bare_out"))

                def ours(spec=spec):
                    steps.current = {}
                    return run_batch(spark, spec)

                def before(spec=before_spec):
                    # as before d922c51: the sink's observed metrics ignored, so the batch waits
                    # for an observation that never comes, then counts its input again
                    steps.ignore_observed = True
                    try:
                        return ours(spec)
                    finally:
                        steps.ignore_observed = False

                def theirs(what=what, bare_read=bare_read, bare_write=bare_write):
                    bare_read(spark, data, what, bare_write)

                calls = [ours, theirs] if IDLE_SECONDS else [ours, before, theirs]
                order = calls[n % len(calls) :] + calls[: n % len(calls)]
                old = (float("nan"), 0)
                for call in order:
                    if IDLE_SECONDS and n >= WARMUP:
                        time.sleep(IDLE_SECONDS)  # Spark closes idle Python workers after 60 s
                    result, seconds, count = _jobs(spark, call)
                    if call is theirs:
                        other = (seconds, count)
                        continue
                    assert result["rows_in"] == ROWS, result
                    if call is ours:
                        row = (seconds, count, dict(steps.current))
                    else:
                        old = (seconds, count)
                if n >= WARMUP:
                    tidemark.append(row[0])
                    jobs.append(row[1])
                    step_rows.append(row[2])
                    bare.append(other[0])
                    bare_jobs.append(other[1])
                    olds.append(old[0])
                    old_jobs.append(old[1])
            t_ms = statistics.median(tidemark) * 1000
            b_ms = statistics.median(bare) * 1000
            figures[name] = {
                "tidemark_ms": round(t_ms, 1),
                "bare_ms": round(b_ms, 1),
                "over_ms": round(t_ms - b_ms, 1),
                "ratio": round(b_ms / t_ms, 2),
                "spark_jobs": max(jobs),
                "bare_spark_jobs": max(bare_jobs),
                "steps_ms": {
                    step: round(statistics.median(r.get(step, 0.0) for r in step_rows) * 1000, 1)
                    for step in ("read", "write", "profile")
                },
            }
            if not IDLE_SECONDS:
                o_ms = statistics.median(olds) * 1000
                figures[name].update(
                    before_ms=round(o_ms, 1),
                    before_over_ms=round(o_ms - b_ms, 1),
                    before_ratio=round(b_ms / o_ms, 2),
                    before_spark_jobs=max(old_jobs),
                )
            print(name, figures[name], flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        server.stop()
        data.conn.close()
        if os.environ.get("BENCH_KEEP") != "1":
            common.drop_database(base, DB_NAME)
    return {
        "rounds": ROUNDS,
        "warmup": WARMUP,
        "rows": ROWS,
        "idle_seconds": IDLE_SECONDS,
        "cases": figures,
        "loads": loads,
    }


def _over(f: dict) -> str:
    over = f"{f['over_ms']:+.0f} ms"
    return over + (" **missed**" if f["over_ms"] > TARGET_MS else "")


def _steps(f: dict) -> str:
    return " / ".join(f"{f['steps_ms'][s]:.0f}" for s in ("read", "write", "profile"))


def report_idle(figures: dict) -> str:
    rows = [
        [name, f"{f['tidemark_ms']:.0f}", f"{f['bare_ms']:.0f}", _over(f), _steps(f)]
        for name, f in figures["cases"].items()
    ]
    loads = ", ".join(f"{x:.1f}" for x in figures["loads"])
    return (
        "## A small batch after a quiet spell (bench_small_batches.py, BENCH_IDLE_SECONDS)\n\n"
        f"Measured {common.now_utc()} at commit {common.git_revision()}, load {loads} "
        "(2 cores, shared). The same batches and bare side as `small_batches`, but each measured "
        f"batch comes {figures['idle_seconds']:g} s after the one before (Spark closes a Python "
        "worker idle for a minute, so each starts new ones), Tidemark's and bare's alternating, "
        f"{figures['rounds']} rounds after {figures['warmup']} warm-up rounds without the wait; "
        f"medians. Target: <= +{TARGET_MS} ms over bare Spark.\n\n"
        + common.table(
            ["path", "Tidemark ms", "bare ms", "over bare", "read / write / profile ms"], rows
        )
    )


def report(figures: dict) -> str:
    rows = []
    for name, f in figures["cases"].items():
        rows.append(
            [
                name,
                f"{f['tidemark_ms']:.0f}",
                f"{f['before_ms']:.0f}",
                f"{f['bare_ms']:.0f}",
                _over(f),
                f"{f['ratio']:.2f}x (before {f['before_ratio']:.2f}x)",
                f"{f['spark_jobs']} / {f['before_spark_jobs']} / {f['bare_spark_jobs']}",
                _steps(f),
            ]
        )
    loads = ", ".join(f"{x:.1f}" for x in figures["loads"])
    return (
        "## Small batches per source and sink (bench_small_batches.py)\n\n"
        f"Measured {common.now_utc()} at commit {common.git_revision()}, load {loads} "
        "(2 cores, shared). One batch = one item of 4 rows `(id bigint, name text, amount int)`: "
        "a Parquet object in S3 (moto on loopback) or a 4-row slice of a PostgreSQL table. "
        "`workers.spark.run.run_batch` in a warm `local[*]` session with the worker's defaults, "
        "static publish fence (the control plane's share is in bench_batches.py), against the "
        "bare read (pyarrow or one psycopg2 query into `createDataFrame`, one partition) + "
        "write (one COPY per "
        f"partition into a table; Delta: `write.parquet`) of the same rows, alternating, "
        f"{figures['rounds']} rounds after {figures['warmup']} warm-up rounds; medians. "
        "`before d922c51`: the same code with the sink's observed metrics ignored, as the batch "
        "ran before that commit (waits 0.5 s for an observation that never comes, then counts "
        "its input in a second Spark job that reads the source again), in the same rounds. "
        f"Target: <= +{TARGET_MS} ms over bare Spark.\n\n"
        + common.table(
            [
                "path",
                "Tidemark ms",
                "before d922c51 ms",
                "bare ms",
                "over bare",
                "bare / Tidemark",
                "Spark jobs (Tidemark / before / bare)",
                "read / write / profile ms",
            ],
            rows,
        )
    )


def main() -> int:
    common.setup_django_path()
    import django

    django.setup()
    figures = measure()
    if IDLE_SECONDS:
        common.write_section("small_batches_idle", report_idle(figures), figures)
    else:
        common.write_section("small_batches", report(figures), figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
