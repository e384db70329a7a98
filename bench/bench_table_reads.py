"""Benchmark: Tidemark's executor read of one Hudi batch and one Iceberg batch of ~1 GB against
the table library's own read of the same data (issue 46).

The data (bench/table_reads_data.py): TABLE_BENCH_MB (default 1024; BENCH_QUICK=1: 48) MB of
snappy Parquet of card transactions (ids, a timestamp, strings, a decimal, a double), one commit
a day into its own partition, 4 files a commit, written once as a Hudi copy-on-write table and
once as an Iceberg table (pyiceberg, SQL catalog on a SQLite file), under a temporary folder
removed at the end.

The arms, alternating in each of BENCH_ROUNDS (default 3) rounds, each library read in a fresh
child process (its memory never counts in the driver's):

- Tidemark: one batch covering every commit of the table, planned the way the control plane
  plans it (Hudi: every completed instant read, every latest file slice, as of the last instant;
  Iceberg: every live data file with the snapshot that added it, the schema as Spark's JSON),
  then read by the worker's reader (`workers.spark.sources.hudi.read` /
  `workers.spark.sources.iceberg.read`, the Python data sources `run.py` reads a batch through)
  in a local[2] SparkSession, every row and column forced by one aggregate: the row count and a
  bit_xor of xxhash64 over all columns. Planning is timed apart (it runs when the batch is
  planned, not when it runs).
- The library: hudi-rs `HudiTableBuilder.from_base_uri(...).build().read()` to Arrow;
  pyiceberg `load_table(...).scan().to_arrow()`.

The Iceberg reader arrives with the `iceberg` source kind; when `workers.spark.sources.iceberg`
is missing the Iceberg arm is skipped and the section says so. Reported: rows (and whether each
arm read the rows written), MB of Parquet, median seconds, MB/s, MB/s per core (the machine's 2
cores, which both arms may use), the ratio of Tidemark's time to the library's, and `uptime`'s
load before and after.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import table_reads_profile  # noqa: E402

common.setup_django_path()

MEGABYTES = int(os.environ.get("TABLE_BENCH_MB") or (48 if common.QUICK else 1024))
COMMITS = int(os.environ.get("TABLE_BENCH_COMMITS") or (4 if common.QUICK else 24))
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
MASTER = "local[2]"
CORES = 2


def iceberg_reader():
    """The worker's Iceberg reader, or None when this tree has no `iceberg` source kind yet."""
    try:
        return importlib.import_module("workers.spark.sources.iceberg")
    except ModuleNotFoundError:
        return None


def uptime() -> str:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return f"{one}, {five}, {fifteen}"


# ---- the libraries' own reads (in a child process) -----------------------------------------


def hudi_library_read(path: str) -> tuple[float, int]:
    from hudi import HudiTableBuilder

    started = time.perf_counter()
    table = HudiTableBuilder.from_base_uri(path).build()
    batches = table.read()
    rows = sum(batch.num_rows for batch in batches)
    return time.perf_counter() - started, rows


def iceberg_library_read(catalog: dict) -> tuple[float, int]:
    from pyiceberg.catalog.sql import SqlCatalog

    started = time.perf_counter()
    table = SqlCatalog("bench", **catalog).load_table("bench.transactions")
    rows = table.scan().to_arrow().num_rows
    return time.perf_counter() - started, rows


def in_child(function, *args):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


# ---- Tidemark's plans (what the control plane hands the worker) -----------------------------


def hudi_spec(path: str) -> dict:
    """One batch over every completed instant of the table (inventory/sources/hudi read_spec's
    plan for a batch covering the whole timeline)."""
    from hudi import HudiTable

    table = HudiTable(path)
    timeline = table.get_timeline()
    instants = sorted(i.timestamp for i in timeline.get_completed_commits())
    slices = [
        {
            "instant": s.creation_instant_time,
            "base": s.base_file_relative_path(),
            "logs": list(s.log_files_relative_paths()),
        }
        for s in table.get_file_slices()
    ]
    return {
        "format": "parquet",
        "source": {
            "kind": "hudi",
            "path": path,
            "instants": instants,
            "reads": instants,
            "slices": slices,
            "as_of": instants[-1],
        },
    }


def iceberg_spec(catalog: dict) -> dict:
    """One batch over every snapshot: each live data file with the snapshot that added it."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql.pandas.types import from_arrow_schema

    table = SqlCatalog("bench", **catalog).load_table("bench.transactions")
    entries = table.inspect.entries().to_pylist()
    added_by = {e["data_file"]["file_path"]: e["snapshot_id"] for e in entries if e["status"] != 2}
    files = [
        {
            "path": task.file.file_path,
            "snapshot": added_by[task.file.file_path],
            "format": "parquet",
            "deletes": [d.file_path for d in task.delete_files],
        }
        for task in table.scan().plan_files()
    ]
    schema = from_arrow_schema(table.schema().as_arrow(), prefer_timestamp_ntz=False)
    snapshots = [s.snapshot_id for s in table.snapshots()]
    return {
        "format": "parquet",
        "source": {
            "kind": "iceberg",
            "table": "bench.transactions",
            "location": table.location(),
            "snapshots": snapshots,
            "as_of": snapshots[-1],
            "files": files,
            "schema": schema.json(),
        },
    }


def tidemark_read(spark, reader, spec: dict) -> tuple[float, int]:
    """The batch read on executors, every column forced: (seconds, rows)."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    df = reader.read(spark, spec)
    row = df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.bit_xor(F.xxhash64(*[F.col(c) for c in df.columns])).alias("hash"),
    ).first()
    return time.perf_counter() - started, row["rows"]


# ---- the run ----------------------------------------------------------------------------------


def warm_up(spark, reader, spec: dict, key: str) -> None:
    """One untimed read of the batch's first file: a worker's session has started its Python
    workers and loaded the reader's modules before the batch comes."""
    source = dict(spec["source"])
    source[key] = source[key][:1]
    tidemark_read(spark, reader, {**spec, "source": source})


def measure(spark, name: str, library, library_arg, reader, spec: dict, expected: int) -> dict:
    warm_up(spark, reader, spec, "slices" if name == "hudi" else "files")
    times = {"library": [], "tidemark": []}
    rows = {"library": set(), "tidemark": set()}
    for round_ in range(ROUNDS):
        # alternate which arm goes first, so a load change in the round weighs on both
        order = ["library", "tidemark"] if round_ % 2 == 0 else ["tidemark", "library"]
        for arm in order:
            if arm == "library":
                seconds, count = in_child(library, library_arg)
            else:
                seconds, count = tidemark_read(spark, reader, spec)
            times[arm].append(seconds)
            rows[arm].add(count)
            print(f"{name} round {round_ + 1} {arm}: {count:,} rows in {seconds:.1f} s", flush=True)
    key = "slices" if name == "hudi" else "files"
    part = max(1, len(spec["source"][key]) // 8)
    layers = table_reads_profile.profile(spark, reader, spec, key, part)
    print(f"{name} profile: {layers}", flush=True)
    return {
        "expected_rows": expected,
        "profile": layers,
        **{f"{arm}_rows": sorted(found) for arm, found in rows.items()},
        **{f"{arm}_seconds": values for arm, values in times.items()},
        **{arm: statistics.median(values) for arm, values in times.items()},
    }


def main() -> int:
    import table_reads_data as data
    from hudi import HudiTableBuilder

    from workers.spark.session import get_session, stop_session
    from workers.spark.sources import hudi as hudi_reader

    load_before = uptime()
    iceberg = iceberg_reader()
    scratch = Path(tempfile.mkdtemp(prefix="bench-table-reads-"))
    results: dict = {}
    try:
        started = time.perf_counter()
        hudi_path = scratch / "transactions_hudi"
        written = in_child(data.write_hudi, hudi_path, MEGABYTES, COMMITS)
        written["write_seconds"] = time.perf_counter() - started
        # the hand-built table read back by hudi-rs before anything is timed
        back = HudiTableBuilder.from_base_uri(str(hudi_path)).build().read()
        back_rows = sum(b.num_rows for b in back)
        del back
        if back_rows != written["rows"]:
            print(f"hudi-rs reads {back_rows} rows of the {written['rows']} written", flush=True)
            return 1
        spark = get_session(MASTER)
        started = time.perf_counter()
        spec = hudi_spec(str(hudi_path))
        plan_seconds = time.perf_counter() - started
        results["hudi"] = {
            **written,
            "plan_seconds": plan_seconds,
            **measure(
                spark,
                "hudi",
                hudi_library_read,
                str(hudi_path),
                hudi_reader,
                spec,
                written["rows"],
            ),
        }
        shutil.rmtree(hudi_path)

        if iceberg is None:
            results["iceberg"] = None
            print("workers.spark.sources.iceberg is missing: Iceberg arm skipped", flush=True)
        else:
            started = time.perf_counter()
            written = in_child(data.write_iceberg, scratch / "iceberg", MEGABYTES, COMMITS)
            written["write_seconds"] = time.perf_counter() - started
            started = time.perf_counter()
            spec = iceberg_spec(written["catalog"])
            plan_seconds = time.perf_counter() - started
            results["iceberg"] = {
                **written,
                "plan_seconds": plan_seconds,
                **measure(
                    spark,
                    "iceberg",
                    iceberg_library_read,
                    written["catalog"],
                    iceberg,
                    spec,
                    written["rows"],
                ),
            }
        stop_session()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(results, load_before, uptime())
    return 0 if all(matches(r) for r in results.values() if r) else 1


def matches(figures: dict) -> bool:
    return figures["library_rows"] == figures["tidemark_rows"] == [figures["expected_rows"]]


def report(results: dict, load_before: str, load_after: str) -> None:
    rows = []
    for kind, label, library in (
        ("hudi", "Hudi copy-on-write", "hudi-rs `read()` (snapshot)"),
        ("iceberg", "Iceberg", "pyiceberg `scan().to_arrow()`"),
    ):
        figures = results.get(kind)
        if not figures:
            rows.append(
                [label, "skipped: this tree has no `workers.spark.sources.iceberg`"] + [""] * 7
            )
            continue
        megabytes = figures["bytes"] / 1024 / 1024
        for arm, reader in (("library", library), ("tidemark", "Tidemark, on executors")):
            seconds = figures[arm]
            found = figures[f"{arm}_rows"]
            rows.append(
                [
                    label,
                    reader,
                    f"{found[0]:,}" if len(found) == 1 else ", ".join(f"{n:,}" for n in found),
                    "yes" if found == [figures["expected_rows"]] else "**no**",
                    f"{megabytes:,.0f}",
                    f"{seconds:.1f} ({', '.join(f'{s:.1f}' for s in figures[f'{arm}_seconds'])})",
                    f"{megabytes / seconds:,.1f}",
                    f"{megabytes / seconds / CORES:,.1f}",
                    f"{seconds / figures['library']:.2f}",
                ]
            )
    profile_rows = []
    for kind in ("hudi", "iceberg"):
        figures = results.get(kind)
        if figures:
            layers = figures["profile"]
            profile_rows.append(
                [
                    kind,
                    layers["files"],
                    f"{layers['rows']:,}",
                    f"{layers['reader']:.1f}",
                    f"{layers['noop']:.1f}",
                    f"{layers['hash']:.1f}",
                    f"{layers['reader'] / layers['hash']:.0%}",
                ]
            )
    shapes = []
    for kind in ("hudi", "iceberg"):
        figures = results.get(kind)
        if figures:
            shapes.append(
                f"{kind}: {figures['rows']:,} rows, {figures['files']} files, {figures['commits']} "
                f"commits, {figures['bytes'] / 1024 / 1024:,.0f} MB of Parquet "
                f"(written in {figures['write_seconds']:.0f} s; the batch planned in "
                f"{figures['plan_seconds']:.2f} s)"
            )
    markdown = f"""## Hudi and Iceberg batches: Tidemark's executor read against the library's own (bench_table_reads.py)

Measured {common.now_utc()}{" (BENCH_QUICK)" if common.QUICK else ""}: one batch covering a whole
table, read by the worker's reader on a {MASTER} SparkSession with every row and column forced
(a count and a bit_xor of xxhash64 over all columns), against the table library reading the same
table to Arrow in one process; the arms alternate, median (and each) of {ROUNDS} rounds. The
table: card transactions (two int64 ids, a UTC timestamp, three strings, a decimal(12,2), a
double, the date partition; Hudi adds its five `_hoodie_*` string columns), one commit a day
into its own partition, 4 snappy Parquet files a commit. The Hudi table is built file by file in
Spark's table version 6 layout (hudi-rs 0.5.0 cannot write) and read back by hudi-rs first; the
Iceberg table is written by pyiceberg (SQL catalog on SQLite).

{chr(10).join(f"- {line}" for line in shapes)}
- load average (1, 5, 15 min) before: {load_before}; after: {load_after} (the 2-core machine is
  shared with other sessions: absolute rates move with it, the ratio less)

{common.table(["table", "reader", "rows", "rows match", "MB", "seconds: median (rounds)", "MB/s", "MB/s per core", "time vs library"], rows)}

Where the Spark arm's time goes, over the first eighth of each table's files
(`bench/table_reads_profile.py`): the worker's reader run in one Python process with no Spark,
the same batch into Spark's `noop` sink, and the aggregate above.

{common.table(["table", "files", "rows", "reader alone (s)", "Spark, noop sink (s)", "Spark, the aggregate (s)", "reader's share of the aggregate run"], profile_rows)}

"time vs library" is the arm's median time over the library's (1.00 = as fast). MB/s per core
divides by the machine's {CORES} cores: hudi-rs and pyarrow (under pyiceberg) read files on
several threads, Spark on its {MASTER} task slots. What the Spark arm adds is in
docs/performance-notes.md ("Hudi and Iceberg batch reads").
"""
    common.write_section("table_reads", markdown, results)
    print(markdown)


if __name__ == "__main__":
    sys.exit(main())
