"""The shape and the settings of a bench_dashboard.py run, from the environment: BENCH_QUICK,
BENCH_JOBS, BENCH_ONE_CONNECTOR, BENCH_REUSE, BENCH_LOAD_ONLY (see bench_dashboard.py)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

# BENCH_JOBS=10000: 10,000 jobs over 1,000 connectors (10 jobs share each), 100 batches each
JOBS = 100 if common.QUICK else int(os.environ.get("BENCH_JOBS", "1000"))
# BENCH_ONE_CONNECTOR=1: every job reads the same connector (the connectors' pages and API at their
# worst: one connector with all the jobs)
ONE_CONNECTOR = os.environ.get("BENCH_ONE_CONNECTOR", "") not in ("", "0", "false")
PER_CONNECTOR = JOBS if ONE_CONNECTOR else max(1, JOBS // 1000)  # jobs sharing one connector
BATCHES_PER_JOB = 1000 if common.QUICK else max(1, 1_000_000 // JOBS)  # ~1M batches in all
BIG_ITEMS_PER_BATCH = 1000  # the first job: 1,000 batches of 1,000 items = a 1,000,000-item range
# the lag after each job's batches (heavy-tailed): job j % 10 == 3 is LAG_LONG behind,
# j % 250 == 3 LAG_HUGE, the others LAG_ITEMS
LAG_ITEMS = 20
LAG_LONG = 10_000 if common.QUICK else 100_000
LAG_HUGE = 200_000 if common.QUICK else 2_000_000
# requests per URL and backlog, in ROUNDS rounds that alternate the backlogs (BENCH_REPEAT: fewer,
# on a machine too loaded for 30)
REPEAT = int(os.environ.get("BENCH_REPEAT", "30"))
ROUNDS = 3
SCALES = ("100x", "1x")
SCAN_REPEAT = 5 if JOBS <= 1000 else 2  # the old scan reads the whole backlog each time
# `make bench` (no BENCH_JOBS): this script runs itself at 1,000 and at 10,000 jobs, each into
# its own database and part (bench/out/dashboard_<jobs>.md), and writes the section from both
# and at 10,000 jobs on one connector
SIZES = ((1000, False), (10000, False), (10000, True))
SHAPE_NAME = f"{JOBS}" + ("_one_connector" if ONE_CONNECTOR else "")
SECTION = "dashboard" if common.QUICK else f"dashboard_{SHAPE_NAME}"
# a name of its own per size: the other benchmarks recreate and drop common.BENCH_DB, which would
# take a database kept for BENCH_REUSE with it
BENCH_DB = f"{common.BENCH_DB}_dashboard_{SHAPE_NAME}"
PAGE_TARGET_MS, METRICS_TARGET_MS = 150, 250
PAGE_TARGET_MS_10K = 300  # pages at 10,000 jobs


def log(message: str) -> None:
    print(f"[bench_dashboard] {message}", flush=True)


# measure the database a previous run left (BENCH_KEEP=1) instead of loading it again
REUSE = os.environ.get("BENCH_REUSE", "") not in ("", "0", "false")
# only load (and keep) the database, to measure it later with BENCH_REUSE=1
LOAD_ONLY = os.environ.get("BENCH_LOAD_ONLY", "") not in ("", "0", "false")
# only the rendered /metrics (cache off) at both backlogs and its breakdown, logged: no pages, no
# old lag scan, no section written (the data load, or BENCH_REUSE, as usual)
METRICS_ONLY = os.environ.get("BENCH_METRICS_ONLY", "") not in ("", "0", "false")
