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
    BENCH_JOBS=10000 BENCH_LOAD_ONLY=1 ...          # only load (and keep) the 10,000-job database
    BENCH_JOBS=10000 BENCH_REUSE=1 BENCH_METRICS_ONLY=1 ...  # only /metrics, rendered each time

The load is bench/dashboard_load.sql (run by dashboard_data.py), the shape and settings
dashboard_shape.py, the section dashboard_render.py.
"""

import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.setup_django_path()

from dashboard_data import (  # noqa: E402
    _p95,
    backlog,
    lag_statements,
    load,
    metrics_breakdown,
    metrics_renders,
    metrics_statements,
    reused_counts,
)
from dashboard_render import HEADER, render  # noqa: E402
from dashboard_shape import (  # noqa: E402
    BATCHES_PER_JOB,
    BENCH_DB,
    JOBS,
    LOAD_ONLY,
    METRICS_ONLY,
    METRICS_TARGET_MS,
    PAGE_TARGET_MS,
    PAGE_TARGET_MS_10K,
    REPEAT,
    REUSE,
    ROUNDS,
    SCALES,
    SCAN_REPEAT,
    SECTION,
    SIZES,
    log,
)


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
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    # a reused database is migrated already: `migrate` would still run its post_migrate handlers,
    # among them the sync of every job's beat entry (one by one: minutes at 10,000 jobs)
    if not REUSE or executor.migration_plan(executor.loader.graph.leaf_nodes()):
        call_command("migrate", verbosity=0)
    # pages name their static files through the manifest, as in production
    import tempfile

    settings.STATIC_ROOT = tempfile.mkdtemp(prefix="bench-static-")
    call_command("collectstatic", interactive=False, verbosity=0)
    return base


class GcWatch:
    """Counts the cyclic collector's runs and their pauses (gc.callbacks) while it is registered:
    all generations, the full (generation 2) ones apart, and the longest pause."""

    def __init__(self):
        self.runs = self.full = 0
        self.pause = self.longest = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        took = time.perf_counter() - self._start
        self.runs += 1
        self.full += info["generation"] == 2
        self.pause += took
        self.longest = max(self.longest, took)

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self)

    def figures(self, requests: int) -> dict:
        return {
            "gc_runs": self.runs,
            "gc_full": self.full,
            "gc_ms": round(self.pause * 1000, 1),
            "gc_longest_ms": round(self.longest * 1000, 1),
            "requests": requests,
        }


def measure(urls, repeat: int, capture: bool) -> list[dict]:
    """`repeat` timed requests of each URL after two warm-ups: {"times": [ms, ...], "queries": n
    or None}, where `capture` counts one request's queries (and logs the two slowest)."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rows = []
    for kind, url in urls:
        headers = {"HTTP_AUTHORIZATION": "Bearer bench"} if kind.startswith("metrics") else {}
        settings.METRICS_CACHE_SECONDS = 0 if kind == "metrics_uncached" else 5
        for _ in range(2):
            assert CLIENT.get(url, **headers).status_code == 200, url
        query_count = None
        if capture:
            connection.queries_log.clear()  # a full log (9,000 entries) would capture nothing
            with CaptureQueriesContext(connection) as queries:
                CLIENT.get(url, **headers)
            query_count = len(queries)
            slowest = sorted(queries.captured_queries, key=lambda q: -float(q["time"]))[:2]
            for query in slowest:
                log(f"  {query['time']} s: {query['sql'][:300]}")
        times = []
        with GcWatch() as watch:
            for _ in range(repeat):
                start = time.perf_counter()
                response = CLIENT.get(url, **headers)
                times.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, url
        rows.append(
            {
                "times": times,
                "queries": query_count,
                "rounds": [round(statistics.median(times), 1)],
                "gc": watch.figures(repeat),
            }
        )
    return rows


def _add_gc(total: dict, more: dict) -> dict:
    return {
        key: max(total[key], more[key])
        if key == "gc_longest_ms"
        else round(total[key] + more[key], 1)
        for key in total
    }


def gc_freeze_compare(urls, repeat: int, rounds: int) -> dict:
    """The hot pages with the process's startup objects frozen (gc.freeze(), as controlplane's
    WSGI and ASGI entries do after loading the application) and without, alternating round by
    round: per mode, every URL's requests' times and the collector's runs and pauses."""
    modes = {
        "frozen": {"times": [], "gc": None, "full_ms": [], "tracked": 0},
        "unfrozen": {"times": [], "gc": None, "full_ms": [], "tracked": 0},
    }
    for round_ in range(rounds):
        order = ("frozen", "unfrozen") if round_ % 2 == 0 else ("unfrozen", "frozen")
        for mode in order:
            gc.unfreeze()
            gc.collect()
            if mode == "frozen":
                gc.freeze()
            # what one full collection of this process costs in this mode, whenever it comes,
            # and how many objects it walks
            modes[mode]["tracked"] = len(gc.get_objects())
            for _ in range(3):
                start = time.perf_counter()
                gc.collect()
                modes[mode]["full_ms"].append((time.perf_counter() - start) * 1000)
            for row in measure(urls, repeat, capture=False):
                found = modes[mode]
                found["times"] += row["times"]
                found["gc"] = row["gc"] if found["gc"] is None else _add_gc(found["gc"], row["gc"])
    gc.unfreeze()
    gc.collect()
    gc.freeze()  # as the pages were measured
    return {
        mode: {
            "median_ms": round(statistics.median(found["times"]), 1),
            "p95_ms": round(_p95(found["times"]), 1),
            "full_collection_ms": round(statistics.median(found["full_ms"]), 1),
            "tracked_objects": found["tracked"],
            **found["gc"],
        }
        for mode, found in modes.items()
    }


def summarize(urls, timed: list[dict]) -> list[dict]:
    """One row per URL from its requests of every round: median, p95, target, met."""
    rows = []
    for (kind, url), part in zip(urls, timed, strict=True):
        times = part["times"]
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
                "queries": part["queries"],
                "round_medians_ms": part["rounds"],
                "target_ms": target,
                "met": target is None or _p95(times) < target,
                "gc": part["gc"],
            }
        )
        log(
            f"{url}: median {rows[-1]['median_ms']} ms, p95 {rows[-1]['p95_ms']} ms, "
            f"{part['queries']} queries; medians by round {part['rounds']} ms"
        )
    return rows


CLIENT = None


def metrics_only() -> int:
    """BENCH_METRICS_ONLY: /metrics rendered at every request (METRICS_CACHE_SECONDS=0), the
    backlogs alternating round by round as the full run does, then a render taken apart and the
    statement timed, at each backlog; logged, no section written."""
    urls = [("metrics_uncached", "/metrics")]
    gc.collect()
    gc.freeze()
    timed = {scale: [] for scale in SCALES}
    for round_ in range(ROUNDS):
        for scale in SCALES if round_ % 2 == 0 else SCALES[::-1]:
            backlog(scale)
            load_before = os.getloadavg()[0]
            part = measure(urls, REPEAT // ROUNDS, capture=not timed[scale])
            timed[scale] += part[0]["times"]
            log(
                f"{scale}, round {round_ + 1} of {ROUNDS}: load {load_before:.1f} -> "
                f"{os.getloadavg()[0]:.1f}"
            )
    for scale in SCALES:
        times = timed[scale]
        backlog(scale)
        log(
            f"{scale}: /metrics uncached: median {statistics.median(times):.1f} ms, "
            f"p95 {_p95(times):.1f} ms over {len(times)} requests (target < {METRICS_TARGET_MS})"
        )
        log(f"{scale}: health_metrics, p95 ms: {metrics_statements(10)}")
        log(f"{scale}: a render taken apart: {metrics_breakdown(5)}")
    return 0


def main_both() -> int:
    """Both sizes, each by a run of this script, then the section from their parts."""
    import subprocess

    parts, failed = [], False
    for jobs, one_connector in SIZES:
        name = f"{jobs}_one_connector" if one_connector else f"{jobs}"
        part = common.OUT_DIR / f"dashboard_{name}.md"
        part.unlink(missing_ok=True)
        env = {
            **os.environ,
            "BENCH_JOBS": str(jobs),
            "BENCH_ONE_CONNECTOR": str(int(one_connector)),
        }
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve())], env=env)
        if proc.returncode == 0 and part.exists():
            parts.append(part.read_text())
        else:
            failed = True
            shape = " on one connector" if one_connector else ""
            parts.append(
                f"### {jobs:,} jobs{shape}\n\n**MISSED: not measured** (the run exited with "
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
        wide = big.connector.name  # the first connector: all the jobs' under BENCH_ONE_CONNECTOR
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
            # a connector's pages: its count of jobs, and its jobs a page at a time
            ("page", "/connectors/"),
            ("api", f"/api/v1/connectors/{wide}/"),
            ("api", f"/api/v1/jobs/?connector__name={wide}"),
            ("page", f"/?connector={wide}"),
            ("metrics", "/metrics"),
            ("metrics_uncached", "/metrics"),
        ]
        if METRICS_ONLY:
            return metrics_only()
        # as the WSGI entry leaves a web process (controlplane/wsgi.py): the loaded application
        # frozen out of the cyclic collector's reach
        gc.collect()
        gc.freeze()
        # the two backlogs alternate, round after round (100x then 1x, then 1x then 100x, ...), so
        # neither is measured only first (the freshly loaded database's cold cache and hint bits)
        timed = {scale: None for scale in SCALES}
        shapes = {scale: None for scale in SCALES}
        for round_ in range(ROUNDS):
            for scale in SCALES if round_ % 2 == 0 else SCALES[::-1]:
                shape = backlog(scale)
                load_before = os.getloadavg()[0]
                part = measure(urls, REPEAT // ROUNDS, capture=timed[scale] is None)
                if timed[scale] is None:
                    timed[scale], shapes[scale] = part, {**shape, "load": []}
                else:
                    for row, more in zip(timed[scale], part, strict=True):
                        row["times"] += more["times"]
                        row["rounds"] += more["rounds"]
                        row["gc"] = _add_gc(row["gc"], more["gc"])
                shapes[scale]["load"] += [round(load_before, 1), round(os.getloadavg()[0], 1)]
                log(f"{scale}, round {round_ + 1} of {ROUNDS}: {shape}")
        # the collector's pauses on the hot pages with the startup objects frozen and without
        backlog("100x")
        hot = [
            ("page", "/"),
            ("api", "/api/v1/jobs/"),
            ("page", f"/?connector={wide}"),
            ("metrics_uncached", "/metrics"),
        ]
        gc_modes = gc_freeze_compare(hot, REPEAT // ROUNDS, ROUNDS)
        log(f"gc.freeze() or not, the hot pages: {gc_modes}")
        for scale in SCALES:
            rows = summarize(urls, timed[scale])
            backlog(scale)
            breakdown = metrics_breakdown(5)
            breakdown["statements"] = metrics_statements(10)
            breakdown["renders"] = metrics_renders(10)
            log(f"{scale}: a rendered /metrics taken apart: {breakdown}")
            # after the pages: the old scan reads the whole backlog, which would leave the pages
            # measured after it a colder cache
            statements = lag_statements(SCAN_REPEAT)
            log(f"{scale}: lag of every job, p95 ms: {statements}")
            results[scale] = {
                "shape": shapes[scale],
                "statements": statements,
                "rows": rows,
                "metrics": breakdown,
                "gc_modes": gc_modes,
                "hot": [url for _, url in hot],
            }
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
