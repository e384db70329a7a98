"""bench_dashboard.py's section of docs/benchmarks.md, from the figures of a run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from dashboard_shape import (  # noqa: E402
    BATCHES_PER_JOB,
    BIG_ITEMS_PER_BATCH,
    LAG_HUGE,
    LAG_ITEMS,
    LAG_LONG,
    PER_CONNECTOR,
    REPEAT,
    ROUNDS,
    SCAN_REPEAT,
)


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
                _gc_cell(r100["gc"], r1["gc"]),
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
            "GC per 100 requests: runs (full), pause ms, longest ms",
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
        " (all of them read one connector, `src-0`: the lag class below is each job's, not its "
        "connector's, and the k-th job is k mod 100 % more behind than its class says)"
        if PER_CONNECTOR >= counts["job"] > 1
        else f" ({PER_CONNECTOR} jobs share each connector: a job's lag is its connector's items past "
        "its own watermark; the k-th job of a connector is k% more behind than the first)"
        if PER_CONNECTOR > 1
        else " (one connector each)"
    )
    loads = "; ".join(
        f"{scale} {' -> '.join(str(x) for x in results[scale]['shape'].get('load', ['?']))}"
        for scale in ("100x", "1x")
    )
    parts = {scale: results[scale]["metrics"] for scale in ("100x", "1x")}
    breakdown = (
        "A rendered `/metrics` taken apart (median of 5 renders after the pages, 100x / 1x): "
        "collecting the metric families "
        + " / ".join(f"{parts[s]['collect_ms']}" for s in parts)
        + " ms, of which SQL "
        + " / ".join(f"{parts[s]['sql_ms']}" for s in parts)
        + " ms; writing them (`inventory/api/exposition.py`) "
        + " / ".join(f"{parts[s]['format_ms']}" for s in parts)
        + " ms, where building prometheus_client's families of the same samples and writing "
        + "them with its `generate_latest` (the same bytes) takes "
        + " / ".join(f"{parts[s]['library_ms']}" for s in parts)
        + f" ms; {parts['100x']['samples']:,} samples, {parts['100x']['bytes'] / 1e6:.1f} MB."
    )
    if all("renders" in parts[s] for s in parts):
        breakdown += (
            " A whole render against the collector it replaced (`bench/metrics_baseline.py`: every "
            "job's full row as an object, every sample a tuple), alternating, 10 each, 100x / 1x: "
            "median "
            + " / ".join(f"{parts[s]['renders']['now_median_ms']}" for s in parts)
            + " ms against "
            + " / ".join(f"{parts[s]['renders']['before_median_ms']}" for s in parts)
            + " ms, p95 "
            + " / ".join(f"{parts[s]['renders']['now_p95_ms']}" for s in parts)
            + " ms against "
            + " / ".join(f"{parts[s]['renders']['before_p95_ms']}" for s in parts)
            + " ms (p95 "
            + " / ".join(f"{parts[s]['renders']['ratio_p95']}x" for s in parts)
            + ")."
        )
    if all("statements" in parts[s] for s in parts):
        breakdown += (
            " Its read of the jobs, timed alternately with the statement it sent before "
            "(`dashboard.sql`: `health_metrics`, one lean row per job, against `health_all`, "
            "every job's full row), p95 of 10 each, 100x / 1x: "
            + " / ".join(f"{parts[s]['statements']['health_metrics']}" for s in parts)
            + " ms against "
            + " / ".join(f"{parts[s]['statements']['health_all']}" for s in parts)
            + " ms ("
            + " / ".join(
                f"{parts[s]['statements']['health_metrics'] / max(parts[s]['statements']['health_all'], 0.01):.2f}x"
                for s in parts
            )
            + ")."
        )
    gc_modes = far.get("gc_modes")
    freeze = ""
    if gc_modes:
        frozen, unfrozen = gc_modes["frozen"], gc_modes["unfrozen"]
        freeze = (
            "The cyclic collector on the hot pages ("
            + ", ".join(f"`{url}`" for url in far["hot"])
            + f"; {frozen['requests']} requests each way, 100x), with the objects of the loaded "
            "application frozen (`gc.freeze()`, as `controlplane/wsgi.py` does after "
            "startup) and without, alternating round by round: "
            + "; ".join(
                f"{mode}: median {m['median_ms']} ms, p95 {m['p95_ms']} ms, {m['gc_runs']} "
                f"collections ({m['gc_full']} full), {m['gc_ms']} ms paused in all, the longest "
                f"{m['gc_longest_ms']} ms"
                for mode, m in (("frozen", frozen), ("unfrozen", unfrozen))
            )
            + f"; p95 frozen / unfrozen {frozen['p95_ms'] / max(unfrozen['p95_ms'], 0.01):.2f}x. "
            + "One full collection (`gc.collect()`, median of 9 per mode) takes "
            + f"{frozen.get('full_collection_ms', '?')} ms frozen against "
            + f"{unfrozen.get('full_collection_ms', '?')} ms not "
            + f"(it walks {frozen.get('tracked_objects', 0):,} objects frozen, "
            + f"{unfrozen.get('tracked_objects', 0):,} not).\n"
        )
    one = " on one connector" if PER_CONNECTOR >= counts["job"] > 1 else ""
    markdown = f"""### {counts["job"]:,} jobs{one}

Data: {counts["batch"]:,} batches over {counts["job"]:,} jobs{shared}, with {counts["batchattempt"]:,}
attempts, {counts["watermarkevent"]:,} watermark events and {counts["asset"]:,} assets, bulk-loaded
with SQL (generate_series) in {counts["load_seconds"]} s into a database of its own{reused}. The lag is
heavy-tailed: every tenth connector's jobs are {LAG_LONG:,} items behind, every 250th's
{LAG_HUGE:,}, the others' {LAG_ITEMS + 5} ("100x"); the same data is measured again with every watermark moved forward to
leave a hundredth of each lag ("1x"), so the two columns differ only in the backlog. The first job
covers a {BIG_ITEMS_PER_BATCH * BATCHES_PER_JOB:,}-item range (its coverage strip and gap report read
all of it); every job has {BATCHES_PER_JOB:,} batches, among them a dead, a failed, a cancelled and two running batches. No backfill is
loaded (`/backfills/` shows its forms and an empty list). Server time through Django's test client
(middleware, views, SQL, templates; no network), {REPEAT} requests per URL and backlog, in {ROUNDS}
rounds that alternate the backlogs (100x then 1x, then 1x then 100x, ...), each URL after two
warm-up requests in every round, so neither backlog is only measured first on the freshly loaded
database; the floor is the cheapest API page (p95 {floor["100x"]} / {floor["1x"]} ms). On
{machine["nproc"]} CPUs ({machine["cpu"]}, shared with other work: absolute figures move with the
load, ratios within the run less; 1-minute load average before and after the pages of each
round: {loads}),
revision {revision}, {when}.

The lag of every job, by Tidemark's statement (prefix sums: two index lookups per job,
`queries.sql: jobs_lag`) and by the old one (count and sum of every asset past each watermark),
alternating, {SCAN_REPEAT} times each, with equal answers:

{lag_table}

Pages at both backlogs (a p95 target is met when both p95s are under it; "median 100x / 1x" is
the page-cost-vs-backlog target, at most 20% more, taken on medians: 30 requests on a shared
machine make a p95 the second-slowest request; ratios below 1 are the machine's load moving, as the
floor's does):

{table}

{breakdown}

{freeze}"""
    return markdown


def _gc_cell(far: dict, near: dict) -> str:
    """The collector's runs (full ones), pause and longest pause per 100 requests, both backlogs."""
    requests = far["requests"] + near["requests"]
    per = 100 / max(requests, 1)
    runs = (far["gc_runs"] + near["gc_runs"]) * per
    full = (far["gc_full"] + near["gc_full"]) * per
    pause = (far["gc_ms"] + near["gc_ms"]) * per
    longest = max(far["gc_longest_ms"], near["gc_longest_ms"])
    return f"{runs:.0f} ({full:.0f}), {pause:.0f}, {longest:.0f}"


HEADER = """## Dashboard, API and /metrics with jobs far behind (`bench/bench_dashboard.py`)

At 1,000 and at 10,000 jobs, and at 10,000 jobs that all read one connector (the connectors page
and API at their worst), each in a database of its own. `/metrics` is measured twice: as
served (a process reuses its exposition for `TIDEMARK_METRICS_CACHE_SECONDS`, 5 s: most of the
requests are served from it) and rendered on every request (the setting at 0: what a scrape
costs when the exposition is older than that, i.e. every scrape of one Prometheus scraping every
15-60 s). Both are held to the target. A rendered exposition has at most five samples per job
by default (docs/api.md): its cost grows with the number of jobs, not with the backlog. The
process is measured as the WSGI entry leaves it (`gc.freeze()` after startup); the GC column
counts the cyclic collector's runs and pauses during the timed requests (`gc.callbacks`).

"""
