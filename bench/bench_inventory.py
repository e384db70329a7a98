"""Benchmark: batch acquire + succeed, and backfill planning, over a 1,000,000-item meta table.

In one run, on one PostgreSQL (the Django settings' server: DATABASE_URL, or the embedded one), in
a dedicated database `tidemark_bench` that is dropped at the end (BENCH_KEEP=1 keeps it):

- Tidemark: inventory.services.batches.batch_acquire + batch_succeed on a job whose connector reads
  the external meta table `bench_meta` (uid, item, weight);
- pybatchintory 0.0.8 (PyPI) in its own virtual environment bench/.venv-pybatchintory, on the same
  meta table, driven by bench/pybatchintory_driver.py as a subprocess;
- a baseline: one hand-written SQL statement per acquire (INSERT ... SELECT with a window sum from
  the job's last batch end) and one UPDATE per succeed, plain psycopg2.

Each runs with 1 and with 4 concurrent clients (separate processes), with a backlog of 1M items
(a job starting at the first item) and of 10k items (jobs starting 10k items before the end; each
such job takes 50 batches, so its backlog stays between 10k and ~5k). After every run, SQL counts
overlapping and missing ranges. Then the whole 1M range is planned as a backfill
(backfill_preview) and checked against a Python reference computed by streaming the table once.
Last, a profile of Tidemark's acquire + succeed (queries per call, SQL vs Python time).

BENCH_QUICK=1 runs a small version (100k items, short runs) to try the script out.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from inventory_checks import backfill_run  # noqa: E402
from inventory_profile import (  # noqa: E402
    baseline_profile,
    explain_plan_step,
    nested_statements,
    profile_run,
)
from inventory_report import rate, render  # noqa: E402
from inventory_runs import peer_run, tidemark_and_baseline  # noqa: E402
from inventory_setup import (  # noqa: E402
    BACKLOGS,
    BUDGET,
    CLIENT_COUNTS,
    MAX_ITEMS,
    META,
    ROWS,
    SYSTEMS,
    create_connector,
    create_tables,
    ensure_peer_venv,
    log,
    peer_versions,
    prepare_database,
    summarize,
)

# ---- main ---------------------------------------------------------------------------------------


def main() -> int:
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    common.OUT_DIR.mkdir(parents=True, exist_ok=True)
    python = ensure_peer_venv()
    versions = peer_versions(python)
    log(f"pybatchintory venv ready: {versions}")
    base = prepare_database()
    server_kind = (
        "embedded pgserver" if not os.environ.get("DATABASE_URL") else "server from DATABASE_URL"
    )
    conn = common.psycopg2_params(base, common.BENCH_DB)
    try:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("SHOW server_version")
            server_version = cur.fetchone()[0]
        log(f"database {common.BENCH_DB} migrated on PostgreSQL {server_version} ({server_kind})")
        load_s = create_tables()
        with connection.cursor() as cur:
            cur.execute(f"SELECT avg(weight)::float FROM {META}")
            mean_weight = cur.fetchone()[0]
        log(f"{META}: {ROWS:,} rows in {load_s:.1f} s")
        connector = create_connector()

        runs = {}
        seq = [0]
        for clients in CLIENT_COUNTS:
            pair = tidemark_and_baseline(connector, conn, clients, seq)
            for (system, backlog), result in pair.items():
                runs[(system, backlog, clients)] = result
            for backlog in BACKLOGS:
                runs[("pybatchintory", backlog, clients)] = peer_run(
                    python, conn, backlog, clients, seq
                )
                if clients == 1:  # its weight-only mode, where nothing bounds its window
                    runs[("pybatchintory_nocap", backlog, clients)] = peer_run(
                        python, conn, backlog, clients, seq, count_cap=False
                    )
                log(
                    f"backlog {backlog:,}, {clients} client(s): "
                    + ", ".join(
                        f"{system} {rate(runs[(system, backlog, clients)]):.1f}/s "
                        f"(overlaps {runs[(system, backlog, clients)]['check']['overlaps']}, "
                        f"gaps {runs[(system, backlog, clients)]['check']['gaps']})"
                        for system in SYSTEMS
                        if (system, backlog, clients) in runs
                    )
                )

        from inventory.models import Job

        backfill_job = Job.objects.select_related("connector").get(name="bench-tidemark-1")
        backfill = backfill_run(backfill_job, conn)
        log(
            f"backfill plan: {min(backfill['seconds']):.3f} s, {backfill['batches']} batches, "
            f"exact {backfill['exact']}"
        )
        profile = profile_run(connector, seq)
        explain = explain_plan_step()
        nested = nested_statements(connector, seq, conn)
        base_profile = baseline_profile(conn, seq)
        log(
            f"profile: {profile['queries_per_acquire']:.1f} + {profile['queries_per_succeed']:.1f} queries, "
            f"{profile['ms_per_batch']:.2f} ms per pair"
        )
    finally:
        from django.db import connections

        connections.close_all()
        if os.environ.get("BENCH_KEEP", "") in ("", "0"):
            common.drop_database(base, common.BENCH_DB)

    ctx = {
        "date": common.now_utc(),
        "runs": runs,
        "backfill": backfill,
        "profile": profile,
        "explain": explain,
        "nested": nested,
        "baseline_profile": base_profile,
        "peer_versions": versions,
        "server_version": server_version,
        "server_kind": server_kind,
        "mean_weight": mean_weight,
        "load_s": load_s,
        "machine": common.machine(),
        "load": (load_start, os.getloadavg()[0]),
    }
    figures = {
        "date": ctx["date"],
        "rows": ROWS,
        "budget": BUDGET,
        "max_items": MAX_ITEMS,
        "server_version": server_version,
        "peer_versions": versions,
        "runs": [
            {
                "system": system,
                "backlog": backlog,
                "clients": clients,
                "batches": r["batches"],
                "elapsed_s": r["elapsed"],
                "batches_per_s": rate(r),
                "acquire": summarize(r["acquire_s"]),
                "succeed": summarize(r["succeed_s"]),
                "conflicts": r["conflicts"],
                "errors": r["errors"],
                "per_client": r["per_client"],
                "check": r["check"],
            }
            for (system, backlog, clients), r in runs.items()
        ],
        "backfill": backfill,
        "profile": profile,
        "nested_statements": nested,
        "baseline_profile": base_profile,
        "total_seconds": time.perf_counter() - started,
    }
    common.write_section("inventory", render(ctx), figures)
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
