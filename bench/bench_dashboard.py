"""Dashboard, API list endpoints and /metrics at scale: 1,000,000 batches (with their attempts and
watermark events) over 1,000 jobs, bulk-loaded with SQL into a database of their own.

Each URL is requested through Django's test client in this process (server time: middleware,
views, queries and templates, no network), REPEAT times after two warm-up requests; the median,
the 95th percentile and the number of SQL queries of one request are reported against the
targets (p95 < 150 ms per page, < 250 ms for /metrics).

    BENCH_QUICK=1 python bench/bench_dashboard.py   # 100,000 batches over 100 jobs
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.setup_django_path()

JOBS = 100 if common.QUICK else 1000
BATCHES_PER_JOB = 1000
BIG_ITEMS_PER_BATCH = 1000  # the first job: 1,000 batches of 1,000 items = a 1,000,000-item range
LAG_ITEMS = 20  # items after each job's last batch
REPEAT = 30
PAGE_TARGET_MS, METRICS_TARGET_MS = 150, 250


def log(message: str) -> None:
    print(f"[bench_dashboard] {message}", flush=True)


def prepare_database() -> dict:
    base = common.base_database()
    common.recreate_database(base, common.BENCH_DB)
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = common.BENCH_DB
    settings.METRICS_TOKEN = "bench"
    settings.ALLOWED_HOSTS = ["*"]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    # pages name their static files through the manifest, as in production
    import tempfile

    settings.STATIC_ROOT = tempfile.mkdtemp(prefix="bench-static-")
    call_command("collectstatic", interactive=False, verbosity=0)
    return base


LOAD_SQL = """
INSERT INTO inventory_connector (name, kind, labels, config, cursor, state, start_after, created_at,
    updated_at)
SELECT 'src-' || j, 'files', '[]', '{}', '{}', CASE WHEN mod(j, 250) = 7 THEN 'waiting' ELSE 'active' END,
       CASE WHEN mod(j, 250) = 7 THEN 'src-1' ELSE '' END, now(), now()
FROM generate_series(0, %(jobs)s - 1) AS j;

-- assets: job 0 has BIG * BATCHES items, the others one per batch, plus LAG_ITEMS each
INSERT INTO inventory_asset (connector_id, location, weight, discovered_at, extra)
SELECT c.id, 's3://bench/' || c.name || '/' || n, 100 + mod(n, 50), now(), '{}'
FROM inventory_connector AS c
CROSS JOIN LATERAL generate_series(
    0, (CASE WHEN c.name = 'src-0' THEN %(big)s ELSE 1 END) * %(per_job)s + %(lag)s - 1) AS n
ORDER BY c.id, n;

INSERT INTO inventory_job (name, connector_id, processor, params, sink, watermark_type, batch_weight,
    max_items, max_attempts, retry_backoff_seconds, lease_seconds, schedule_seconds, schedule_cron,
    max_concurrency, executor, start_position, lookback, paused, created_at, updated_at)
SELECT 'job-' || substr(c.name, 5), c.id, 'passthrough', '{}', '{}', 'int', 1000000, 1000, 3, 30, 120,
       300, '', 2, 'warm', 0, 0, false, now(), now()
FROM inventory_connector AS c ORDER BY c.id;

CREATE TEMP TABLE job_items AS
SELECT j.id AS job_id, j.connector_id, min(a.id) AS first_id,
       (CASE WHEN j.name = 'job-0' THEN %(big)s ELSE 1 END) AS per_batch
FROM inventory_job AS j JOIN inventory_asset AS a ON a.connector_id = j.connector_id
GROUP BY j.id, j.connector_id, j.name;

-- batches: b = 0 .. per_job-1, mostly succeeded; the last ones of each job: a dead, a failed,
-- a cancelled, two running; finished over the last 30 days, the newest within the last day
INSERT INTO inventory_batch (job_id, kind, status, span, item_count, weight, attempt, max_attempts,
    lease_expires_at, worker, next_attempt_at, created_at, started_at, finished_at, result,
    watermark_value, error, skip_reason, config_snapshot)
SELECT ji.job_id, 'incremental',
       CASE b WHEN %(per_job)s - 5 THEN 'dead' WHEN %(per_job)s - 4 THEN 'failed'
              WHEN %(per_job)s - 3 THEN 'cancelled' WHEN %(per_job)s - 2 THEN 'running'
              WHEN %(per_job)s - 1 THEN 'running' ELSE 'succeeded' END,
       int8range(ji.first_id + b * ji.per_batch, ji.first_id + (b + 1) * ji.per_batch),
       ji.per_batch, ji.per_batch * 120, 1, 3,
       CASE WHEN b >= %(per_job)s - 2 THEN now() + interval '10 minutes' END,
       'bench-worker', CASE WHEN b = %(per_job)s - 4 THEN now() + interval '1 minute' END,
       now() - make_interval(mins => (%(per_job)s - b) * 43),
       now() - make_interval(mins => (%(per_job)s - b) * 43),
       CASE WHEN b < %(per_job)s - 2 THEN now() - make_interval(mins => (%(per_job)s - b) * 43 - 1) END,
       '{"rows_in": 1000, "rows_out": 1000}', NULL,
       CASE WHEN b IN (%(per_job)s - 5, %(per_job)s - 4)
            THEN '{"type": "AnalysisException", "message": "bad file"}'::jsonb ELSE '{}'::jsonb END,
       '', '{}'
FROM job_items AS ji CROSS JOIN generate_series(0, %(per_job)s - 1) AS b;

INSERT INTO inventory_batchattempt (batch_id, number, worker, started_at, finished_at, outcome, error)
SELECT id, 1, worker, started_at, finished_at,
       CASE WHEN status IN ('succeeded') THEN 'succeeded' WHEN status IN ('dead', 'failed') THEN 'failed'
            ELSE '' END, error
FROM inventory_batch ORDER BY id;

INSERT INTO inventory_watermark (job_id, type, position, value, updated_at)
SELECT ji.job_id, 'int', ji.first_id + (%(per_job)s - 5) * ji.per_batch,
       to_jsonb(ji.first_id + (%(per_job)s - 5) * ji.per_batch - 1), now() - interval '4 hours'
FROM job_items AS ji;

INSERT INTO inventory_watermarkevent (watermark_id, old_position, new_position, old_value, new_value,
    source, batch_id, actor, reason, is_replay, created_at)
SELECT w.id, lower(b.span), upper(b.span), to_jsonb(lower(b.span) - 1), to_jsonb(upper(b.span) - 1),
       'batch', b.id, '', '', false, b.finished_at
FROM inventory_batch AS b JOIN inventory_watermark AS w ON w.job_id = b.job_id
WHERE b.status = 'succeeded' ORDER BY b.id;

INSERT INTO inventory_maintenancerun (name, last_run_at, outcome)
VALUES ('tidemark:reap-leases', now(), '{}') ON CONFLICT (name) DO NOTHING;
"""


def load() -> dict:
    from django.db import connection

    started = time.perf_counter()
    params = {
        "jobs": JOBS,
        "per_job": BATCHES_PER_JOB,
        "big": BIG_ITEMS_PER_BATCH,
        "lag": LAG_ITEMS,
    }
    with connection.cursor() as cursor:
        for statement in LOAD_SQL.split(";\n\n"):
            if statement.strip():
                cursor.execute(statement, params)
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        counts = {}
        for table in ("job", "asset", "batch", "batchattempt", "watermarkevent"):
            cursor.execute(f"SELECT count(*) FROM inventory_{table}")
            counts[table] = cursor.fetchone()[0]
    counts["load_seconds"] = round(time.perf_counter() - started, 1)
    return counts


def measure() -> list[dict]:
    from django.contrib.auth.models import User
    from django.core.signals import request_started
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from inventory.models import Batch, Job
    from inventory.services.metrics_rollup import attempt_rollup_advance

    # count a whole request's queries (Django clears the log when a request starts)
    request_started.disconnect(reset_queries)
    attempt_rollup_advance()  # what the reaper step keeps doing in production
    user = User.objects.create_superuser("bench", password=None)
    client = Client()
    client.force_login(user)
    big = Job.objects.get(name="job-0")
    dead = Batch.objects.filter(job=big, status="dead").first()
    urls = [
        ("page", "/"),
        ("page", f"/jobs/{big.name}/"),
        ("page", f"/jobs/{big.name}/?status=succeeded&page=3"),
        ("page", f"/jobs/{big.name}/gaps/"),
        ("page", "/connectors/"),
        ("page", "/backfills/"),
        ("page", f"/batches/{dead.pk}/"),
        ("api", "/api/v1/alerts/"),
        ("api", "/api/v1/jobs/"),
        ("api", "/api/v1/batches/"),
        ("api", "/api/v1/backfills/"),
        ("api", "/api/v1/connectors/"),
        ("api", f"/api/v1/jobs/{big.name}/gaps/"),
        ("metrics", "/metrics"),
    ]
    rows = []
    for kind, url in urls:
        headers = {"HTTP_AUTHORIZATION": "Bearer bench"} if kind == "metrics" else {}
        for _ in range(2):
            assert client.get(url, **headers).status_code == 200, url
        connection.queries_log.clear()  # a full log (9,000 entries) would capture nothing
        with CaptureQueriesContext(connection) as queries:
            client.get(url, **headers)
        query_count = len(queries)
        slowest = sorted(queries.captured_queries, key=lambda q: -float(q["time"]))[:2]
        for query in slowest:
            log(f"  {query['time']} s: {query['sql'][:300]}")
        times = []
        for _ in range(REPEAT):
            start = time.perf_counter()
            response = client.get(url, **headers)
            times.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, url
        times.sort()
        p95 = times[max(int(len(times) * 0.95) - 1, 0)]
        target = METRICS_TARGET_MS if kind == "metrics" else PAGE_TARGET_MS
        rows.append(
            {
                "kind": kind,
                "url": url,
                "median_ms": round(statistics.median(times), 1),
                "p95_ms": round(p95, 1),
                "queries": query_count,
                "target_ms": target,
                "met": p95 < target,
            }
        )
        log(
            f"{url}: median {rows[-1]['median_ms']} ms, p95 {rows[-1]['p95_ms']} ms, {query_count} queries"
        )
    return rows


def main() -> int:
    base = prepare_database()
    try:
        log(f"loading {JOBS * BATCHES_PER_JOB:,} batches over {JOBS} jobs")
        counts = load()
        log(f"loaded {counts}")
        rows = measure()
    finally:
        from django.db import connections

        connections.close_all()
        if not os.environ.get("BENCH_KEEP"):
            common.drop_database(base, common.BENCH_DB)
    machine = common.machine()
    table = common.table(
        ["", "URL", "median ms", "p95 ms", "target p95", "queries", ""],
        [
            [
                r["kind"],
                f"`{r['url']}`",
                r["median_ms"],
                r["p95_ms"],
                f"< {r['target_ms']} ms",
                r["queries"],
                "met" if r["met"] else "**missed**",
            ]
            for r in rows
        ],
    )
    markdown = f"""## Dashboard, API lists and /metrics at scale (`bench/bench_dashboard.py`)

{counts["batch"]:,} batches over {counts["job"]:,} jobs, with {counts["batchattempt"]:,} attempts,
{counts["watermarkevent"]:,} watermark events and {counts["asset"]:,} assets, bulk-loaded with SQL
(generate_series) in {counts["load_seconds"]} s into a database of its own. The first job covers a
{BIG_ITEMS_PER_BATCH * BATCHES_PER_JOB:,}-item range (its coverage strip and gap report read all of it);
every job has a dead, a failed, a cancelled and two running batches, so the alert strip, the
blockers and the gap report all have something to find. Server time through Django's test client
(middleware, views, SQL, templates; no network), {REPEAT} requests after two warm-ups, on
{machine["nproc"]} CPUs ({machine["cpu"]}), revision {common.git_revision()}, {common.now_utc()}.
The number of queries does not depend on the number of jobs or batches
(`tests/test_dashboard_health.py::test_queries_per_page_do_not_grow_with_jobs_or_batches`).

{table}
"""
    common.write_section("dashboard", markdown, {"counts": counts, "rows": rows})
    log("done")
    return 0 if all(r["met"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
