"""Benchmark: planning a connector's assets by their prefix sums against walking its items.

The shape: 1,000,000 assets (100,000 with BENCH_QUICK) registered as discovery registers them, ids
in visibility order, every tenth one of another connector (so the searches cross a neighbour's
ids), weights 1..1000 from a multiplicative hash of the row number (mean ~500, as bench_inventory's
meta table). The same plans two ways, alternating in each round, answers compared:

- prefix sums: `tidemark_plan_assets` (index searches on the assets' running count and weight,
  what acquire, a plan step and a backfill plan use for every source whose items are assets);
- walk: `tidemark_plan_batches` over the same assets' item query (a window over the rows of the
  batch, what a local meta table read in place still gets).

Measured: a whole backfill plan of the connector's range (budget 50,000, cap 1,000: ~100 items a
batch); one plan step at positions spread over the range, with that budget and with big batches
(budget 10^12, cap 100,000: the walk reads 100,000 rows a step). Writes the section `planning`.
"""

import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

ROWS = 100_000 if common.QUICK else 1_000_000
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or (3 if common.QUICK else 5))
STEPS = 20  # plan steps per round and shape
SHAPES = {"~100 items a batch": (50_000, 1_000), "big batches": (10**12, 100_000)}
DB_NAME = "tidemark_bench_planning"
WEIGHT_SQL = "1 + ((g * 2654435761) %% 4294967296) %% 1000"  # %%: bound params follow


def log(message: str) -> None:
    print(f"[bench_planning {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _timed(cursor, sql: str, params) -> tuple[float, list]:
    started = time.perf_counter()
    cursor.execute(sql, params)
    rows = cursor.fetchall()
    return time.perf_counter() - started, rows


def _load(cursor, target: int, other: int) -> None:
    cursor.execute(
        f"""
        INSERT INTO inventory_asset (
            connector_id, location, weight, extra, discovered_at, cum_count, cum_weight
        )
        SELECT conn, 'bench/' || g, w, '{{}}'::jsonb, now(),
               row_number() OVER (PARTITION BY conn ORDER BY g),
               sum(w) OVER (PARTITION BY conn ORDER BY g)
        FROM (
            SELECT g, {WEIGHT_SQL} AS w, CASE WHEN g %% 10 = 0 THEN %s ELSE %s END AS conn
            FROM generate_series(1, %s) AS g
        ) AS s
        ORDER BY g
        """,
        [other, target, ROWS],
    )
    cursor.execute("ANALYZE inventory_asset")


def measure() -> dict:
    base = common.base_database()
    common.recreate_database(base, DB_NAME)
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = DB_NAME
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from inventory.models import Connector
    from inventory.sources.items import assets_source

    call_command("migrate", verbosity=0)
    target = Connector.objects.create(name="bench-target", kind="files", config={"path": "/x"})
    other = Connector.objects.create(name="bench-other", kind="files", config={"path": "/y"})
    loads = [os.getloadavg()[0]]
    try:
        with connection.cursor() as cursor:
            started = time.perf_counter()
            _load(cursor, target.pk, other.pk)
            log(f"{ROWS:,} assets loaded in {time.perf_counter() - started:.1f} s")
            cursor.execute(
                "SELECT min(id), max(id), count(*) FROM inventory_asset WHERE connector_id = %s",
                [target.pk],
            )
            first, last, count = cursor.fetchone()
            items_sql = assets_source(target.pk).planning_query()
            by_sums = "SELECT * FROM tidemark_plan_assets(%s, %s, %s, %s, %s, %s)"
            by_walk = "SELECT * FROM tidemark_plan_batches(%s, %s, %s, %s, %s, %s)"
            whole = {"sums": [], "walk": []}
            steps = {name: {"sums": [], "walk": []} for name in SHAPES}
            batches = 0
            rng = random.Random(7)
            for round_no in range(ROUNDS):
                order = ("sums", "walk") if round_no % 2 == 0 else ("walk", "sums")
                answers = {}
                for system in order:
                    sql, head = (by_sums, target.pk) if system == "sums" else (by_walk, items_sql)
                    seconds, rows = _timed(
                        cursor, sql, [head, first, last + 1, 50_000, 1_000, None]
                    )
                    whole[system].append(seconds)
                    answers[system] = rows
                assert answers["sums"] == answers["walk"], "the two plans differ"
                batches = len(answers["sums"])
                for name, (budget, cap) in SHAPES.items():
                    for _ in range(STEPS):
                        at = rng.randint(first, last - 1)
                        answers = {}
                        for system in order:
                            sql, head = (
                                (by_sums, target.pk) if system == "sums" else (by_walk, items_sql)
                            )
                            seconds, rows = _timed(cursor, sql, [head, at, None, budget, cap, 1])
                            steps[name][system].append(seconds)
                            answers[system] = rows
                        assert answers["sums"] == answers["walk"], (name, at)
                loads.append(os.getloadavg()[0])
                log(f"round {round_no + 1}/{ROUNDS} done")
    finally:
        connection.close()
        common.drop_database(base, DB_NAME)

    def ms(values, q=0.5):
        values = sorted(values)
        return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 2)

    return {
        "rows": ROWS,
        "target_assets": count,
        "rounds": ROUNDS,
        "batches_in_whole_plan": batches,
        "whole_ms": {s: round(statistics.median(v) * 1000, 1) for s, v in whole.items()},
        "steps_ms": {
            name: {s: {"p50": ms(v), "p95": ms(v, 0.95)} for s, v in systems.items()}
            for name, systems in steps.items()
        },
        "loads": loads,
    }


def report(f: dict) -> str:
    whole = f["whole_ms"]
    rows = [
        [
            f"whole backfill plan ({f['batches_in_whole_plan']:,} batches)",
            f"{whole['sums']:.1f}",
            f"{whole['walk']:.1f}",
            f"{whole['walk'] / whole['sums']:.1f}x",
        ]
    ]
    for name, systems in f["steps_ms"].items():
        rows.append(
            [
                f"one plan step, {name} (p50 / p95)",
                f"{systems['sums']['p50']} / {systems['sums']['p95']}",
                f"{systems['walk']['p50']} / {systems['walk']['p95']}",
                f"{systems['walk']['p50'] / systems['sums']['p50']:.1f}x",
            ]
        )
    small, big = (f["steps_ms"][name]["sums"]["p50"] for name in SHAPES)
    loads = ", ".join(f"{x:.1f}" for x in f["loads"])
    return (
        "## Planning by prefix sums (bench_planning.py)\n\n"
        f"Measured {common.now_utc()} at commit {common.git_revision()}, load {loads} (2 cores, "
        f"shared). {f['rows']:,} assets, {f['target_assets']:,} of the planned connector (every "
        "tenth one another connector's, between its ids), weights 1..1000 (mean ~500). The same "
        "plans by `tidemark_plan_assets` (index searches on the prefix sums) and by "
        "`tidemark_plan_batches` walking the same assets' rows, alternating in each of "
        f"{f['rounds']} rounds, answers equal; the whole plan's median, and {STEPS} plan steps per "
        "round at random positions (budget 50,000 and cap 1,000; big batches: budget 10^12, cap "
        "100,000).\n\n"
        + common.table(["plan", "prefix sums ms", "item walk ms", "walk / prefix sums"], rows)
        + f"\n\nA plan step by prefix sums: {small} ms (p50) for ~100 items and {big} ms for "
        "100,000, six index probes either way (what is left between the two is which pages the "
        "probes find cached); the walk reads every row of the batch. A whole plan does those "
        "probes once per batch, the walk reads each row once: with ~100 items a batch the two "
        f"cost about the same ({whole['sums']:.0f} and {whole['walk']:.0f} ms here), and the "
        "probes win as batches grow. A local meta table read in place still walks its rows (no "
        "prefix sums in a user's table): bench_inventory's acquire and backfill figures are over "
        "such a table.\n"
    )


def main() -> int:
    common.setup_django_path()
    figures = measure()
    common.write_section("planning", report(figures), figures)
    print(report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
