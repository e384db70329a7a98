"""Dashboard, API and /metrics when jobs are far behind: 1,000,000 batches (with their attempts and
watermark events) over 1,000 jobs and a heavy-tailed lag (every tenth job 100,000 items behind,
every 250th 2,000,000; the others 25), about 19M assets, bulk-loaded with SQL into a database of
their own.

Each URL is requested through Django's test client in this process (server time: middleware,
views, queries and templates, no network), REPEAT times after two warm-up requests, at two
backlogs over the same data: "100x" (the lag above) and "1x" (every watermark moved forward so
that a hundredth of it is left). The floor is the cheapest API page (`/api/v1/connectors/`). The
lag statement of all jobs is timed both ways in the same run, alternating: Tidemark's prefix sums
(queries.sql: jobs_lag) and the old scan (count/sum of the assets past each watermark).

    BENCH_QUICK=1 python bench/bench_dashboard.py   # 100,000 batches over 100 jobs, a tenth of the lag
    BENCH_KEEP=1 ...; BENCH_REUSE=1 ...             # keep the loaded database; measure it again
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.setup_django_path()

# BENCH_JOBS=10000: 10,000 jobs over 1,000 connectors (10 jobs share each), 100 batches each
JOBS = 100 if common.QUICK else int(os.environ.get("BENCH_JOBS", "1000"))
PER_CONNECTOR = max(1, JOBS // 1000)  # jobs sharing one connector
BATCHES_PER_JOB = 1000 if common.QUICK else max(1, 1_000_000 // JOBS)  # ~1M batches in all
BIG_ITEMS_PER_BATCH = 1000  # the first job: 1,000 batches of 1,000 items = a 1,000,000-item range
# the lag after each job's batches (heavy-tailed): job j % 10 == 3 is LAG_LONG behind,
# j % 250 == 3 LAG_HUGE, the others LAG_ITEMS
LAG_ITEMS = 20
LAG_LONG = 10_000 if common.QUICK else 100_000
LAG_HUGE = 200_000 if common.QUICK else 2_000_000
REPEAT = 30
SCAN_REPEAT = 5 if JOBS <= 1000 else 2  # the old scan reads the whole backlog each time
# `make bench` (no BENCH_JOBS): this script runs itself at 1,000 and at 10,000 jobs, each into
# its own database and part (bench/out/dashboard_<jobs>.md), and writes the section from both
SIZES = (1000, 10000)
SECTION = "dashboard" if common.QUICK else f"dashboard_{JOBS}"
BENCH_DB = common.BENCH_DB if JOBS <= 1000 else f"{common.BENCH_DB}_{JOBS}"
PAGE_TARGET_MS, METRICS_TARGET_MS = 150, 250
PAGE_TARGET_MS_10K = 300  # pages at 10,000 jobs


def log(message: str) -> None:
    print(f"[bench_dashboard] {message}", flush=True)


# measure the database a previous run left (BENCH_KEEP=1) instead of loading it again
REUSE = os.environ.get("BENCH_REUSE", "") not in ("", "0", "false")
# only load (and keep) the database, to measure it later with BENCH_REUSE=1
LOAD_ONLY = os.environ.get("BENCH_LOAD_ONLY", "") not in ("", "0", "false")


def prepare_database() -> dict:
    base = common.base_database()
    if not REUSE:
        common.recreate_database(base, BENCH_DB)
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = BENCH_DB
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
-- the shape: job j reads connector j / per_connector (%(per_connector)s jobs per connector); the
-- lag class is the connector's (every tenth LAG_LONG, every 250th LAG_HUGE, the others LAG_ITEMS),
-- the k-th job of a connector 1%% more behind than the (k-1)-th; job 0 covers per_job batches of
-- BIG items, the others per_job batches of 1 item. A connector has as many assets as its longest
-- job covers plus lags; each job's batches end where its own lag starts.
CREATE TABLE bench_shape AS
SELECT j, j / %(per_connector)s AS c, (CASE WHEN j = 0 THEN %(big)s ELSE 1 END) AS per_batch,
       (CASE WHEN j = 0 THEN %(big)s ELSE 1 END) * %(per_job)s AS span,
       (CASE WHEN mod(j / %(per_connector)s, 250) = 3 THEN %(huge)s
             WHEN mod(j / %(per_connector)s, 10) = 3 THEN %(long)s ELSE %(lag)s END)::bigint
           * (100 + mod(j, %(per_connector)s)) / 100 AS lag
FROM generate_series(0, %(jobs)s - 1) AS j;

CREATE TABLE bench_connector_size AS
SELECT c, max(span + lag) AS size FROM bench_shape GROUP BY c;

INSERT INTO inventory_connector (name, kind, labels, config, cursor, state, start_after, created_at,
    updated_at)
SELECT 'src-' || c, 'files', '[]', '{}', '{}', CASE WHEN mod(c, 250) = 7 THEN 'waiting' ELSE 'active' END,
       CASE WHEN mod(c, 250) = 7 THEN 'src-1' ELSE '' END, now(), now()
FROM bench_connector_size ORDER BY c;

-- assets: bench_connector_size.size per connector, with their
-- prefix sums (what assets_register writes) in closed form: weight 100 + mod(n, 50)
ALTER TABLE inventory_asset DISABLE TRIGGER tidemark_asset_prefix_insert;

-- loaded without its secondary indexes and foreign key, which are built once afterwards
DO $$
DECLARE fk text;
BEGIN
    SELECT conname INTO fk FROM pg_constraint
    WHERE conrelid = 'inventory_asset'::regclass AND contype = 'f';
    EXECUTE 'ALTER TABLE inventory_asset DROP CONSTRAINT ' || quote_ident(fk);
END $$;

ALTER TABLE inventory_asset DROP CONSTRAINT asset_connector_location_unique;

DROP INDEX asset_connector_id_idx;

INSERT INTO inventory_asset (connector_id, location, weight, discovered_at, extra, cum_count,
    cum_weight)
SELECT c.id, 's3://bench/' || c.name || '/' || n, 100 + mod(n, 50), now(), '{}', n + 1,
       100 * (n + 1) + 1225 * ((n + 1) / 50) + mod(n + 1, 50) * (mod(n + 1, 50) - 1) / 2
FROM inventory_connector AS c
JOIN bench_connector_size AS s ON s.c = substr(c.name, 5)::int
CROSS JOIN LATERAL generate_series(0, s.size - 1) AS n
ORDER BY c.id, n;

ALTER TABLE inventory_asset ENABLE TRIGGER tidemark_asset_prefix_insert;

CREATE INDEX asset_connector_id_idx ON inventory_asset (connector_id, id);

ALTER TABLE inventory_asset ADD CONSTRAINT asset_connector_location_unique
    UNIQUE (connector_id, location);

ALTER TABLE inventory_asset ADD CONSTRAINT asset_connector_fk FOREIGN KEY (connector_id)
    REFERENCES inventory_connector (id) DEFERRABLE INITIALLY DEFERRED;

INSERT INTO inventory_job (name, connector_id, processor, params, sink, watermark_type, batch_weight,
    max_items, max_attempts, retry_backoff_seconds, lease_seconds, schedule_seconds, schedule_cron,
    max_concurrency, executor, start_position, lookback, paused, created_at, updated_at,
    restatements)
SELECT 'job-' || s.j, c.id, 'passthrough', '{}', '{}', 'int', 1000000, 1000, 3, 30, 120,
       300, '', 2, 'warm', 0, 0, false, now(), now(), 'automatic'
FROM bench_shape AS s JOIN inventory_connector AS c ON c.name = 'src-' || s.c ORDER BY s.j;

CREATE TEMP TABLE job_items AS
SELECT j.id AS job_id, j.connector_id, first.id + n.size - s.span - s.lag AS first_id, s.per_batch
FROM bench_shape AS s
JOIN inventory_job AS j ON j.name = 'job-' || s.j
JOIN bench_connector_size AS n ON n.c = s.c
CROSS JOIN LATERAL (SELECT min(a.id) AS id FROM inventory_asset AS a
                    WHERE a.connector_id = j.connector_id) AS first;

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

-- attempts, and the hourly rates rollup their trigger keeps, counted once (as migration 0027 does)
ALTER TABLE inventory_batchattempt DISABLE TRIGGER tidemark_rates_count_insert;

INSERT INTO inventory_batchattempt (batch_id, number, worker, started_at, finished_at, outcome, error)
SELECT id, 1, worker, started_at, finished_at,
       CASE WHEN status IN ('succeeded') THEN 'succeeded' WHEN status IN ('dead', 'failed') THEN 'failed'
            ELSE '' END, error
FROM inventory_batch ORDER BY id;

ALTER TABLE inventory_batchattempt ENABLE TRIGGER tidemark_rates_count_insert;

INSERT INTO inventory_jobhourlyrates (job_id, hour, succeeded, failed, items, weight)
SELECT b.job_id, date_trunc('hour', a.finished_at, 'UTC'),
       count(*) FILTER (WHERE a.outcome = 'succeeded'),
       count(*) FILTER (WHERE a.outcome <> 'succeeded'),
       coalesce(sum(b.item_count) FILTER (WHERE a.outcome = 'succeeded'), 0),
       coalesce(sum(b.weight) FILTER (WHERE a.outcome = 'succeeded'), 0)
FROM inventory_batchattempt AS a JOIN inventory_batch AS b ON b.id = a.batch_id
WHERE a.outcome <> '' AND a.finished_at >= statement_timestamp() - interval '2 days'
GROUP BY 1, 2;

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
        cursor.execute(
            "CREATE TABLE bench_positions AS SELECT w.job_id, w.position AS far, "
            "max(a.id) + 1 - ceil((max(a.id) + 1 - w.position) / 100.0)::bigint AS near "
            "FROM inventory_watermark AS w JOIN inventory_job AS j ON j.id = w.job_id "
            "JOIN inventory_asset AS a ON a.connector_id = j.connector_id "
            "GROUP BY w.job_id, w.position"
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
            f"FROM ({query('jobs_lag').rstrip().rstrip(';').replace('%s', 'ARRAY(SELECT id FROM inventory_job)')}) "
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
                cursor.execute(sql, [ids])
                answers[name] = sorted((a, int(b), int(c)) for a, b, c in cursor.fetchall())
                times[name].append((time.perf_counter() - start) * 1000)
    assert answers["prefix"] == answers["scan"], "the two lag statements disagree"
    return {name: round(_p95(t), 1) for name, t in times.items()}


def measure(urls) -> list[dict]:
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rows = []
    for kind, url in urls:
        headers = {"HTTP_AUTHORIZATION": "Bearer bench"} if kind.startswith("metrics") else {}
        settings.METRICS_CACHE_SECONDS = 0 if kind == "metrics_uncached" else 5
        for _ in range(2):
            assert CLIENT.get(url, **headers).status_code == 200, url
        connection.queries_log.clear()  # a full log (9,000 entries) would capture nothing
        with CaptureQueriesContext(connection) as queries:
            CLIENT.get(url, **headers)
        query_count = len(queries)
        slowest = sorted(queries.captured_queries, key=lambda q: -float(q["time"]))[:2]
        for query in slowest:
            log(f"  {query['time']} s: {query['sql'][:300]}")
        times = []
        for _ in range(REPEAT):
            start = time.perf_counter()
            response = CLIENT.get(url, **headers)
            times.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, url
        target = {
            "metrics": METRICS_TARGET_MS,
            "metrics_uncached": METRICS_TARGET_MS,
            "floor": None,
        }.get(kind, PAGE_TARGET_MS)
        if JOBS > 1000 and kind not in ("metrics", "metrics_uncached", "floor"):
            target = PAGE_TARGET_MS_10K
        rows.append(
            {
                "kind": kind,
                "url": url,
                "median_ms": round(statistics.median(times), 1),
                "p95_ms": round(_p95(times), 1),
                "queries": query_count,
                "target_ms": target,
                "met": target is None or _p95(times) < target,
            }
        )
        log(
            f"{url}: median {rows[-1]['median_ms']} ms, p95 {rows[-1]['p95_ms']} ms, {query_count} queries"
        )
    return rows


CLIENT = None


def render(counts: dict, results: dict, machine: dict, revision: str, when: str) -> str:
    """The section of docs/benchmarks.md, from the figures of one run."""
    far, near = results["100x"], results["1x"]
    reused = (
        " (by an earlier run with BENCH_KEEP=1; this run measured it again, BENCH_REUSE=1)"
        if counts.get("reused")
        else ""
    )
    floor = {scale: results[scale]["rows"][0]["p95_ms"] for scale in results}
    table_rows = []
    for r100, r1 in zip(far["rows"], near["rows"], strict=True):
        ratio = r100["median_ms"] / r1["median_ms"] if r1["median_ms"] else 0
        verdict = ""
        if r100["kind"] != "floor":
            verdict = "met" if r100["met"] and r1["met"] else "**MISSED**"
        table_rows.append(
            [
                r100["kind"],
                f"`{r100['url']}`",
                r100["median_ms"],
                r1["median_ms"],
                r100["p95_ms"],
                r1["p95_ms"],
                f"{ratio:.2f}x" + ("" if ratio <= 1.2 else " (**> 20% more**)"),
                "—" if r100["target_ms"] is None else f"< {r100['target_ms']} ms",
                r100["queries"],
                verdict,
            ]
        )
    table = common.table(
        [
            "",
            "URL",
            "median ms (100x)",
            "median ms (1x)",
            "p95 ms (100x)",
            "p95 ms (1x)",
            "median 100x / 1x",
            "target p95",
            "queries",
            "",
        ],
        table_rows,
    )
    lag_table = common.table(
        [
            "backlog",
            "items behind",
            "jobs >= 100k behind",
            "largest lag",
            "prefix sums p95 ms",
            "old scan p95 ms",
            "scan / prefix",
        ],
        [
            [
                scale,
                f"{results[scale]['shape']['items_behind']:,}",
                f"{results[scale]['shape']['jobs_100k']} of {results[scale]['shape']['jobs']}",
                f"{results[scale]['shape']['largest']:,}",
                results[scale]["statements"]["prefix"],
                results[scale]["statements"]["scan"],
                f"{results[scale]['statements']['scan'] / max(results[scale]['statements']['prefix'], 0.01):.1f}x",
            ]
            for scale in ("100x", "1x")
        ],
    )
    shared = (
        f" ({PER_CONNECTOR} jobs share each connector: a job's lag is its connector's items past "
        "its own watermark; the k-th job of a connector is k% more behind than the first)"
        if PER_CONNECTOR > 1
        else " (one connector each)"
    )
    markdown = f"""### {counts["job"]:,} jobs

Data: {counts["batch"]:,} batches over {counts["job"]:,} jobs{shared}, with {counts["batchattempt"]:,}
attempts, {counts["watermarkevent"]:,} watermark events and {counts["asset"]:,} assets, bulk-loaded
with SQL (generate_series) in {counts["load_seconds"]} s into a database of its own{reused}. The lag is
heavy-tailed: every tenth connector's jobs are {LAG_LONG:,} items behind, every 250th's
{LAG_HUGE:,}, the others' {LAG_ITEMS + 5} ("100x"); the same data is measured again with every watermark moved forward to
leave a hundredth of each lag ("1x"), so the two columns differ only in the backlog. The first job
covers a {BIG_ITEMS_PER_BATCH * BATCHES_PER_JOB:,}-item range (its coverage strip and gap report read
all of it); every job has {BATCHES_PER_JOB:,} batches, among them a dead, a failed, a cancelled and two running batches. No backfill is
loaded (`/backfills/` shows its forms and an empty list). Server time through Django's test client
(middleware, views, SQL, templates; no network), {REPEAT} requests after two warm-ups per URL and
backlog; the floor is the cheapest API page (p95 {floor["100x"]} / {floor["1x"]} ms). On
{machine["nproc"]} CPUs ({machine["cpu"]}, shared with other work: absolute figures move with the
load, ratios within the run less), revision {revision}, {when}.

The lag of every job, by Tidemark's statement (prefix sums: two index lookups per job,
`queries.sql: jobs_lag`) and by the old one (count and sum of every asset past each watermark),
alternating, {SCAN_REPEAT} times each, with equal answers:

{lag_table}

Pages at both backlogs (a p95 target is met when both p95s are under it; "median 100x / 1x" is
the page-cost-vs-backlog target, at most 20% more, taken on medians: 30 requests on a shared
machine make a p95 the second-slowest request; ratios below 1 are the machine's load moving, as the
floor's does):

{table}
"""
    return markdown


HEADER = """## Dashboard, API and /metrics with jobs far behind (`bench/bench_dashboard.py`)

At 1,000 and at 10,000 jobs, each in a database of its own. `/metrics` is measured twice: as
served (a process reuses its exposition for `TIDEMARK_METRICS_CACHE_SECONDS`, 5 s: most of the
30 requests are served from it) and rendered on every request (the setting at 0: what a scrape
costs when the exposition is older than that, i.e. every scrape of one Prometheus scraping every
15-60 s). Both are held to the target.

"""


def main_both() -> int:
    """Both sizes, each by a run of this script, then the section from their parts."""
    import subprocess

    parts, failed = [], False
    for jobs in SIZES:
        part = common.OUT_DIR / f"dashboard_{jobs}.md"
        part.unlink(missing_ok=True)
        env = {**os.environ, "BENCH_JOBS": str(jobs)}
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve())], env=env)
        if proc.returncode == 0 and part.exists():
            parts.append(part.read_text())
        else:
            failed = True
            parts.append(
                f"### {jobs:,} jobs\n\n**MISSED: not measured** (the run exited with "
                f"{proc.returncode}).\n"
            )
    common.write_section("dashboard", HEADER + "\n".join(parts))
    return 1 if failed else 0


def main() -> int:
    global CLIENT
    if not common.QUICK and "BENCH_JOBS" not in os.environ:
        return main_both()
    base = prepare_database()
    results = {}
    try:
        if REUSE:
            counts = reused_counts()
        else:
            log(f"loading {JOBS * BATCHES_PER_JOB:,} batches over {JOBS} jobs")
            counts = load()
            if LOAD_ONLY:
                import json

                common.OUT_DIR.mkdir(parents=True, exist_ok=True)
                (common.OUT_DIR / f"{SECTION}.json").write_text(json.dumps({"counts": counts}))
                log(f"loaded {counts}; kept {BENCH_DB} (BENCH_LOAD_ONLY)")
                return 0
        log(f"loaded {counts}")
        from django.contrib.auth.models import User
        from django.core.signals import request_started
        from django.db import reset_queries
        from django.test import Client

        from inventory.models import Batch, Job
        from inventory.services.metrics_rollup import attempt_rollup_advance

        # count a whole request's queries (Django clears the log when a request starts)
        request_started.disconnect(reset_queries)
        attempt_rollup_advance()  # what the reaper step keeps doing in production
        CLIENT = Client()
        user = User.objects.filter(username="bench").first()
        CLIENT.force_login(user or User.objects.create_superuser("bench", password=None))
        big = Job.objects.get(name="job-0")
        behind = Job.objects.get(name="job-3")  # LAG_HUGE items behind at 100x
        dead = Batch.objects.filter(job=big, status="dead").first()
        urls = [
            ("floor", "/api/v1/connectors/"),
            ("page", "/"),
            ("api", "/api/v1/alerts/"),
            ("page", f"/jobs/{behind.name}/"),
            ("page", f"/jobs/{big.name}/"),
            ("page", f"/jobs/{big.name}/gaps/"),
            ("page", "/backfills/"),
            ("page", f"/batches/{dead.pk}/"),
            ("api", "/api/v1/jobs/"),
            ("metrics", "/metrics"),
            ("metrics_uncached", "/metrics"),
        ]
        for scale in ("100x", "1x"):
            shape = backlog(scale)
            log(f"{scale}: {shape}")
            rows = measure(urls)
            # after the pages: the old scan reads the whole backlog, which would leave the pages
            # measured after it a colder cache
            statements = lag_statements(SCAN_REPEAT)
            log(f"{scale}: lag of every job, p95 ms: {statements}")
            results[scale] = {"shape": shape, "statements": statements, "rows": rows}
    finally:
        from django.db import connections

        connections.close_all()
        if not (os.environ.get("BENCH_KEEP") or LOAD_ONLY):
            common.drop_database(base, BENCH_DB)
    markdown = render(counts, results, common.machine(), common.git_revision(), common.now_utc())
    if common.QUICK:
        markdown = HEADER + markdown
    common.write_section(SECTION, markdown, {"counts": counts, "results": results})
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
