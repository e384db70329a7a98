"""bench_inventory's profiles: where Tidemark's acquire + succeed time goes (queries, SQL vs
Python), the planning step's EXPLAIN, the nested statements, the baseline's own profile."""

import cProfile
import io
import pstats
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from inventory_clients import BASELINE_ACQUIRE, BASELINE_SUCCEED  # noqa: E402
from inventory_setup import BUDGET, MAX_ITEMS, META, PROFILE_BATCHES  # noqa: E402

# ---- where the time goes ------------------------------------------------------------------------


def _normalize(sql: str) -> str:
    sql = re.sub(r"\s+", " ", sql).strip()
    sql = re.sub(r"'[^']*'", "?", sql)
    sql = re.sub(r"\b\d+\b", "?", sql)
    return sql


def profile_run(connector, seq: list) -> dict:
    """Queries and time per acquire + succeed for one client at the 1M backlog (untimed runs)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from inventory.models import Job
    from inventory.services.jobs import job_create
    from inventory.services.lifecycle import batch_acquire, batch_succeed
    from inventory.sources.registry import source_for_connector

    seq[0] += 1
    job = job_create(
        name=f"bench-tidemark-{seq[0]}",
        connector=connector,
        batch_weight=BUDGET,
        max_items=MAX_ITEMS,
        start_position=1,
    )
    job = Job.objects.select_related("connector").get(pk=job.pk)
    source = source_for_connector(job.connector)  # once, as a worker does (inventory_clients)
    for _ in range(20):  # warm up
        batch = batch_acquire(job=job, worker="bench-profile", source=source)
        batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})

    by_query: dict = {}
    acquire_queries = succeed_queries = 0
    sql_s = 0.0
    started = time.perf_counter()
    for _ in range(PROFILE_BATCHES):
        with CaptureQueriesContext(connection) as acq:
            batch = batch_acquire(job=job, worker="bench-profile", source=source)
        with CaptureQueriesContext(connection) as suc:
            batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
        acquire_queries += len(acq.captured_queries)
        succeed_queries += len(suc.captured_queries)
        for phase, captured in (("acquire", acq), ("succeed", suc)):
            for q in captured.captured_queries:
                key = (phase, _normalize(q["sql"]))
                seconds = float(q["time"])
                sql_s += seconds
                count, total = by_query.get(key, (0, 0.0))
                by_query[key] = (count + 1, total + seconds)
    wall_s = time.perf_counter() - started

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILE_BATCHES):
        batch = batch_acquire(job=job, worker="bench-profile", source=source)
        batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
    profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)
    (common.OUT_DIR / "inventory_profile.txt").write_text(stream.getvalue())

    top = sorted(by_query.items(), key=lambda kv: -kv[1][1])
    return {
        "batches": PROFILE_BATCHES,
        "queries_per_acquire": acquire_queries / PROFILE_BATCHES,
        "queries_per_succeed": succeed_queries / PROFILE_BATCHES,
        "ms_per_batch": 1000 * wall_s / PROFILE_BATCHES,
        "sql_ms_per_batch": 1000 * sql_s / PROFILE_BATCHES,
        "queries": [
            {
                "phase": phase,
                "sql": sql,
                "per_batch": count / PROFILE_BATCHES,
                "ms_per_batch": 1000 * total / PROFILE_BATCHES,
                "ms_each": 1000 * total / count,
            }
            for (phase, sql), (count, total) in top
        ],
    }


def baseline_profile(conn_params: dict, seq: list) -> dict:
    """The baseline's acquire + succeed with explicit commits: statement time vs commit time."""
    import psycopg2

    seq[0] += 1
    job = f"bench-sql-{seq[0]}"
    params = {"job": job, "first": 1, "budget": BUDGET, "max_items": MAX_ITEMS, "worker": "p"}
    conn = psycopg2.connect(**conn_params)
    statements_s = commits_s = 0.0
    try:
        cur = conn.cursor()
        for index in range(20 + PROFILE_BATCHES):
            t0 = time.perf_counter()
            cur.execute(BASELINE_ACQUIRE, params)
            batch_id = cur.fetchone()[0]
            t1 = time.perf_counter()
            conn.commit()
            t2 = time.perf_counter()
            cur.execute(BASELINE_SUCCEED, [batch_id])
            t3 = time.perf_counter()
            conn.commit()
            t4 = time.perf_counter()
            if index >= 20:  # the first 20 warm up
                statements_s += (t1 - t0) + (t3 - t2)
                commits_s += (t2 - t1) + (t4 - t3)
    finally:
        conn.close()
    return {
        "statements_ms_per_batch": 1000 * statements_s / PROFILE_BATCHES,
        "commits_ms_per_batch": 1000 * commits_s / PROFILE_BATCHES,
    }


def explain_plan_step() -> str:
    """EXPLAIN ANALYZE of the item read an acquire plans from, at the start of the table."""
    from django.db import connection

    try:  # the product's own query for this meta table
        from inventory.sources.items import meta_table_source

        source = meta_table_source({"table": META})
        items_sql, params = source.select(lower=1, upper=None, limit=MAX_ITEMS + 1, with_item=False)
    except (ImportError, AttributeError, TypeError):  # its shape changed: the same read by hand
        items_sql = f"SELECT uid, weight FROM {META} WHERE uid >= %s ORDER BY uid LIMIT %s"
        params = [1, MAX_ITEMS + 1]
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + items_sql, params)
        return "\n".join(row[0] for row in cur.fetchall())


_PLAN_LINE = re.compile(r"^\s*(->\s*)?[A-Z][A-Za-z ]+.*\((actual|cost)")


def nested_statements(connector, seq: list, conn_params: dict) -> dict | None:
    """Every statement inside one acquire and one succeed, with its time (auto_explain, nested).

    auto_explain logs each finished statement, including those run inside PL/pgSQL functions;
    with client_min_messages = log the log lines come back to this connection as notices. None
    when the server has no auto_explain (pgserver ships no contrib modules).
    """
    from django.db import connection

    from inventory.models import Job
    from inventory.services.jobs import job_create
    from inventory.services.lifecycle import batch_acquire, batch_succeed

    seq[0] += 1
    job = job_create(
        name=f"bench-tidemark-{seq[0]}",
        connector=connector,
        batch_weight=BUDGET,
        max_items=MAX_ITEMS,
        start_position=1,
    )
    job = Job.objects.select_related("connector").get(pk=job.pk)
    for _ in range(5):  # warm: plans cached, buffers hot
        batch = batch_acquire(job=job, worker="bench-explain")
        batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
    connection.ensure_connection()
    raw = connection.connection
    try:
        with connection.cursor() as cur:
            cur.execute("LOAD 'auto_explain'")
    except Exception:
        return None
    settings = {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_buffers": "on",
        "auto_explain.log_wal": "on",
        "client_min_messages": "log",
    }
    with connection.cursor() as cur:
        for name, value in settings.items():
            cur.execute("SELECT set_config(%s, %s, false)", [name, value])
    captured = {}
    try:
        for phase in ("acquire", "succeed"):
            raw.notices = []
            if phase == "acquire":
                batch = batch_acquire(job=job, worker="bench-explain")
            else:
                batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
            captured[phase] = list(raw.notices)
    finally:
        with connection.cursor() as cur:
            cur.execute("SELECT set_config('client_min_messages', 'notice', false)")
            cur.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
        raw.notices = []
    # the same for one pair of the SQL baseline, on a connection of its own
    import psycopg2

    seq[0] += 1
    base = psycopg2.connect(**conn_params)
    base.autocommit = True
    try:
        cur = base.cursor()
        cur.execute("LOAD 'auto_explain'")
        for name, value in settings.items():
            cur.execute("SELECT set_config(%s, %s, false)", [name, value])
        params = {
            "job": f"bench-sql-{seq[0]}",
            "first": 1,
            "budget": BUDGET,
            "max_items": MAX_ITEMS,
            "worker": "bench-explain",
        }
        base.notices = []
        cur.execute(BASELINE_ACQUIRE, params)
        batch_id = cur.fetchone()[0]
        captured["SQL baseline acquire"] = list(base.notices)
        base.notices = []
        cur.execute(BASELINE_SUCCEED, [batch_id])
        captured["SQL baseline succeed"] = list(base.notices)
    finally:
        base.close()
    statements, full = [], []
    for phase, notices in captured.items():
        for notice in notices:
            full.append(f"-- {phase}\n{notice.strip()}\n")
            match = re.search(r"duration: ([\d.]+) ms", notice)
            if not match or "Query Text:" not in notice:
                continue
            text_lines = []
            for line in notice.split("Query Text:", 1)[1].splitlines():
                if _PLAN_LINE.match(line):
                    break
                text_lines.append(re.sub(r"--.*$", "", line).strip())
            text = re.sub(r"\s+", " ", " ".join(text_lines)).strip()
            wal = re.search(r"WAL: records=(\d+)(?: fpi=(\d+))?(?: bytes=(\d+))?", notice)
            statements.append(
                {
                    "phase": phase,
                    "ms": float(match.group(1)),
                    "sql": text,
                    "wal_records": int(wal.group(1)) if wal else 0,
                    "wal_fpi": int(wal.group(2) or 0) if wal else 0,
                    "wal_bytes": int(wal.group(3) or 0) if wal else 0,
                }
            )
    (common.OUT_DIR / "inventory_explain.txt").write_text("\n".join(full))
    return {"statements": statements}
