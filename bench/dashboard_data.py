"""bench_dashboard.py's data: the bulk load (dashboard_load.sql), the two backlogs over it, and the
lag of every job by Tidemark's statement and by the old scan."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from dashboard_shape import (  # noqa: E402
    BATCHES_PER_JOB,
    BENCH_DB,
    BIG_ITEMS_PER_BATCH,
    JOBS,
    LAG_HUGE,
    LAG_ITEMS,
    LAG_LONG,
    PER_CONNECTOR,
    SECTION,
    log,
)


def reused_counts() -> dict:
    """The counts of a database loaded by an earlier run, with that run's load time."""
    import json

    from django.db import connection

    counts = {}
    with connection.cursor() as cursor:
        for table in ("job", "asset", "batch", "batchattempt", "watermarkevent"):
            cursor.execute(f"SELECT count(*) FROM inventory_{table}")
            counts[table] = cursor.fetchone()[0]
    previous = common.OUT_DIR / f"{SECTION}.json"
    loaded = json.loads(previous.read_text())["counts"] if previous.exists() else {}
    counts["load_seconds"] = loaded.get("load_seconds", "?")
    counts["reused"] = True
    log(f"reusing {BENCH_DB}: {counts}")
    return counts


def load() -> dict:
    from django.db import connection

    started = time.perf_counter()
    params = {
        "jobs": JOBS,
        "per_connector": PER_CONNECTOR,
        "per_job": BATCHES_PER_JOB,
        "big": BIG_ITEMS_PER_BATCH,
        "lag": LAG_ITEMS,
        "long": LAG_LONG,
        "huge": LAG_HUGE,
    }
    load_sql = (Path(__file__).resolve().parent / "dashboard_load.sql").read_text()
    with connection.cursor() as cursor:
        for statement in load_sql.split(";\n\n"):
            if statement.strip():
                step = time.perf_counter()
                cursor.execute(statement, params)
                if time.perf_counter() - step > 1:
                    first = next(
                        line for line in statement.splitlines() if not line.startswith("--")
                    )
                    log(f"  {time.perf_counter() - step:.1f} s: {first.strip()[:70]}")
    connection.close()
    with connection.cursor() as cursor:
        step = time.perf_counter()
        cursor.execute("VACUUM ANALYZE")
        log(f"  {time.perf_counter() - step:.1f} s: VACUUM ANALYZE")
        # the load leaves gigabytes of dirty buffers: written now, not by the checkpoint that
        # would come during the first pages measured (a database in use has written them long ago)
        step = time.perf_counter()
        cursor.execute("CHECKPOINT")
        log(f"  {time.perf_counter() - step:.1f} s: CHECKPOINT")
        counts = {}
        for table in ("job", "asset", "batch", "batchattempt", "watermarkevent"):
            cursor.execute(f"SELECT count(*) FROM inventory_{table}")
            counts[table] = cursor.fetchone()[0]
        cursor.execute(
            "CREATE TABLE bench_positions AS SELECT w.job_id, w.position AS far, "
            "m.last + 1 - ceil((m.last + 1 - w.position) / 100.0)::bigint AS near "
            "FROM inventory_watermark AS w JOIN inventory_job AS j ON j.id = w.job_id "
            # the connector's last asset, by index (not a join of every asset with its jobs)
            "CROSS JOIN LATERAL (SELECT max(a.id) AS last FROM inventory_asset AS a "
            "WHERE a.connector_id = j.connector_id) AS m"
        )
    counts["load_seconds"] = round(time.perf_counter() - started, 1)
    return counts


OLD_LAG_SQL = """
SELECT j.id, p.n, p.w
FROM inventory_job AS j JOIN inventory_watermark AS w ON w.job_id = j.id
JOIN inventory_connector AS c ON c.id = j.connector_id
CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce(sum(a.weight), 0) AS w
FROM inventory_asset AS a
WHERE a.connector_id = j.connector_id AND a.id >= w.position) AS p
WHERE j.id = ANY(%s) AND NOT coalesce(c.config ? 'meta_table', false) AND c.kind <> 'job_output'
"""


def _p95(times: list[float]) -> float:
    times = sorted(times)
    return times[max(int(len(times) * 0.95) - 1, 0)]


def backlog(scale: str) -> dict:
    """Move every watermark to its position of `scale` ("100x": far, "1x": near) and describe
    the backlog: items behind in all, jobs >= 100,000 behind, the largest lag."""
    from django.db import connection

    from inventory.sql import query

    column = "far" if scale == "100x" else "near"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE inventory_watermark AS w SET position = p.{column} FROM bench_positions AS p "
            "WHERE p.job_id = w.job_id"
        )
        cursor.execute(
            "SELECT sum(l.n), count(*) FILTER (WHERE l.n >= 100000), max(l.n), count(*) "
            f"FROM ({query('jobs_lag').rstrip().rstrip(';').replace('%(ids)s', 'ARRAY(SELECT id FROM inventory_job)')}) "
            "AS l(id, n, w)"
        )
        total, long_, largest, jobs = cursor.fetchone()
    return {"items_behind": int(total), "jobs_100k": long_, "largest": int(largest), "jobs": jobs}


def lag_statements(repeat: int) -> dict:
    """The lag of every job, Tidemark's statement and the old scan alternating; same answers."""
    from django.db import connection

    from inventory.sql import query

    with connection.cursor() as cursor:
        cursor.execute("SELECT array_agg(id) FROM inventory_job")
        ids = cursor.fetchone()[0]
        times = {"prefix": [], "scan": []}
        answers = {}
        for _ in range(repeat):
            for name, sql in (("prefix", query("jobs_lag")), ("scan", OLD_LAG_SQL)):
                start = time.perf_counter()
                cursor.execute(sql, {"ids": ids} if name == "prefix" else [ids])
                answers[name] = sorted((a, int(b), int(c)) for a, b, c in cursor.fetchall())
                times[name].append((time.perf_counter() - start) * 1000)
    assert answers["prefix"] == answers["scan"], "the two lag statements disagree"
    return {name: round(_p95(t), 1) for name, t in times.items()}


def metrics_breakdown(repeat: int) -> dict:
    """Where a rendered /metrics spends its time, median of `repeat` renders: collecting the
    metric families (their SQL apart; the per-job families' lines are written while their rows
    are read) and writing them (inventory/api/exposition.py), the cyclic collector paused as in
    exposition(); and, alternating with it, prometheus_client's generate_latest writing the same
    samples (read back by Prometheus's parser beforehand, untimed; the same bytes:
    tests/api/test_metrics_exposition.py)."""
    import statistics

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from inventory.api.exposition import parsed_families, render, written_by_prometheus_client
    from inventory.api.metrics import InventoryCollector, _cycle_collector_paused

    collector = InventoryCollector()
    runs = []
    for _ in range(repeat):
        # as a served render runs (exposition(): the cyclic collector paused)
        with _cycle_collector_paused():
            with CaptureQueriesContext(connection) as queries:
                start = time.perf_counter()
                families = list(collector.collect())
                collected = time.perf_counter()
            body = render(families)
            done = time.perf_counter()
            same = parsed_families(body)
            library_start = time.perf_counter()
            library_body = written_by_prometheus_client(same)
            library_done = time.perf_counter()
        assert library_body == body, "the two writers differ"
        sql = sum(float(q["time"]) for q in queries.captured_queries)
        runs.append(
            {
                "collect_ms": (collected - start) * 1000,
                "sql_ms": sql * 1000,
                "format_ms": (done - collected) * 1000,
                "library_ms": (library_done - library_start) * 1000,
            }
        )
    found = {key: round(statistics.median(r[key] for r in runs), 1) for key in runs[0]}
    found["samples"] = sum(len(family.samples) for family in same)
    found["bytes"] = len(body)
    return found


def metrics_statements(repeat: int) -> dict:
    """/metrics' read of the jobs, timed alternately in the same run: health_metrics (what it
    sends now: one lean row per job, fetched as psycopg2 hands it over) against health_all (the
    rows it read before, every job's full row, which the graph page still reads): p95 ms each,
    their rows fetched."""
    from django.db import connection

    from inventory.selectors_health import Health
    from inventory.sql import dashboard_query

    health = Health()
    statements = {
        "health_metrics": (dashboard_query("health_metrics"), health.params(full=False)),
        "health_all": (dashboard_query("health_all"), health.params()),
    }
    times = {name: [] for name in statements}
    with connection.cursor() as cursor:
        for _ in range(repeat):
            for name, (sql, params) in statements.items():
                start = time.perf_counter()
                cursor.execute(sql, params)
                cursor.fetchall()
                times[name].append((time.perf_counter() - start) * 1000)
    return {name: round(_p95(t), 1) for name, t in times.items()}


def metrics_renders(repeat: int) -> dict:
    """A whole /metrics render (collect and write, the cyclic collector paused as served) by
    inventory/api/metrics.py and by the collector it replaced (bench/metrics_baseline.py),
    alternating, `repeat` times each: median and p95 ms of each, and the sample lines of both
    compared (equal but for the values that move with the clock)."""
    import statistics

    from metrics_baseline import collect_before

    from inventory.api.exposition import render
    from inventory.api.metrics import InventoryCollector, _cycle_collector_paused

    collector = InventoryCollector()
    times = {"now": [], "before": []}
    bodies = {}
    for _ in range(repeat):
        for name, collect in (("now", collector.collect), ("before", collect_before)):
            with _cycle_collector_paused():
                start = time.perf_counter()
                bodies[name] = render(collect())
                times[name].append((time.perf_counter() - start) * 1000)

    def samples(body: bytes) -> list[str]:
        lines = [line for line in body.decode().splitlines() if not line.startswith("#")]
        return [line.rsplit(" ", 1)[0] for line in lines]

    assert samples(bodies["now"]) == samples(bodies["before"]), "the two collectors differ"
    found = {}
    for name, taken in times.items():
        found[f"{name}_median_ms"] = round(statistics.median(taken), 1)
        found[f"{name}_p95_ms"] = round(_p95(taken), 1)
    found["ratio_median"] = round(found["now_median_ms"] / max(found["before_median_ms"], 0.01), 2)
    found["ratio_p95"] = round(found["now_p95_ms"] / max(found["before_p95_ms"], 0.01), 2)
    return found
