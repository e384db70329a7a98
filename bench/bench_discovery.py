"""Benchmark: discovery of 100 new files among 50,000 known ones, against a bare os.scandir.

In a dedicated database `tidemark_bench_discovery` on the settings' PostgreSQL server (dropped at
the end; BENCH_KEEP=1 keeps it): one `files` connector over one flat directory of 50,000 small
Parquet-named files, all registered. Then, round after round, 100 new files land and are timed:

- bare scandir: `[entry.name for entry in os.scandir(directory)]`, the least any discovery does;
- bare scandir + stat: the same with a `stat` per file (what the issue measured as its baseline);
- Tidemark: `directory_discover` (walk, known-set refresh, stat of the new files, completeness,
  registration in one transaction) with this process's copy of the registered locations warm,
  i.e. every scan after a process's first;
- Tidemark, nothing new: the same scan when no file landed;
- Tidemark, cold: the first scan of a process (the registered locations loaded once).

The systems alternate within each round, so they see the same machine load; the names-only scandir
and the warm scan take turns at coming first in a round (the one right after the stat of every file
found less in the CPU caches: in a trial on 2026-11-28, the warm scan took 22.9 ms there against 20.8-21.3 ms
right after the scandir). Every file's mtime
is set in the past (older than `settle_seconds`), so the completeness rule takes no probe sleep.
The 50,000 known assets are registered 2 hours before the timed scans (their `discovered_at` is
moved back): a directory that grew over time, whose files are out of the 1-hour `recheck_seconds`
window. Every known file inside the window (a slice of `recheck_per_scan` stat-ed per
scan) is measured too, alternating with a names-only scandir; then the registration rate
(files/hour) of batches of new files registered by one scan each.

BENCH_QUICK=1 runs 5,000 known files and 3 rounds.
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DB_NAME = "tidemark_bench_discovery"
KNOWN = 5_000 if common.QUICK else 50_000
NEW = 100
ROUNDS = 3 if common.QUICK else 7
OLD = time.time() - 3600
REG_BATCH = 2_000 if common.QUICK else 10_000
REG_BATCHES = 3 if common.QUICK else 10


def _touch_many(directory: Path, first: int, count: int) -> None:
    for n in range(first, first + count):
        path = directory / f"part-{n:07d}.parquet"
        with open(path, "wb") as fh:
            fh.write(b"PAR1")
        os.utime(path, (OLD + n * 1e-3, OLD + n * 1e-3))


def _bare(directory: Path) -> float:
    started = time.perf_counter()
    names = [entry.name for entry in os.scandir(directory)]
    assert names
    return time.perf_counter() - started


def _bare_stat(directory: Path) -> float:
    started = time.perf_counter()
    sizes = [entry.stat().st_size for entry in os.scandir(directory)]
    assert sizes
    return time.perf_counter() - started


def _timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def _median_ms(values) -> float:
    return round(statistics.median(values) * 1000, 1)


def main() -> int:
    base = common.base_database()
    common.recreate_database(base, DB_NAME)
    import django
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = DB_NAME
    # the landing directory lives under the temporary directory: allow it (path confinement)
    settings.TIDEMARK_ALLOWED_ROOTS = [
        *settings.TIDEMARK_ALLOWED_ROOTS,
        os.path.realpath(tempfile.gettempdir()),
    ]
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    if connection.settings_dict["NAME"] != DB_NAME:
        raise RuntimeError(f"refusing to run on {connection.settings_dict['NAME']!r}")
    call_command("migrate", verbosity=0)
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-discovery-"))
    try:
        figures = measure(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.environ.get("BENCH_KEEP") != "1":
            from django.db import connections

            connections.close_all()
            common.drop_database(base, DB_NAME)
    write(figures)
    return 0


def measure(work: Path) -> dict:
    from django.db import connection

    from inventory.services.connectors import connector_create
    from inventory.sources import files
    from inventory.sources.files import known as files_known

    directory = work / "landing"
    directory.mkdir()
    _touch_many(directory, 0, KNOWN)
    connector = connector_create(name="landing", kind="files", config={"path": str(directory)})
    setup_started = time.perf_counter()
    assert files.directory_discover(connector=connector) == KNOWN
    first_scan_s = time.perf_counter() - setup_started
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE inventory_asset SET discovered_at = discovered_at - interval '2 hours' "
            "WHERE connector_id = %s",
            [connector.pk],
        )
        cursor.execute("VACUUM ANALYZE inventory_asset")
    files_known.known_files_forget()
    files.directory_discover(connector=connector)  # this process's copy of the known set, warm

    rows = {"bare": [], "bare_stat": [], "warm": [], "none": [], "cold": []}
    loads = []
    next_file = KNOWN

    def warm() -> None:
        seconds, new = _timed(lambda: files.directory_discover(connector=connector))
        assert new == NEW, new
        rows["warm"].append(seconds)

    def bare() -> None:
        rows["bare"].append(_bare(directory))

    for round_ in range(ROUNDS):
        loads.append(os.getloadavg()[0])
        _touch_many(directory, next_file, NEW)
        next_file += NEW
        rows["bare_stat"].append(_bare_stat(directory))
        # a scan right after the stat of every file (or after the previous round's cold scan)
        # finds less of what it reads in the CPU caches: the names-only scandir and the warm scan
        # take turns at coming first
        for step in (bare, warm) if round_ % 2 == 0 else (warm, bare):
            step()
        seconds, new = _timed(lambda: files.directory_discover(connector=connector))
        assert new == 0
        rows["none"].append(seconds)
        # the same scan as a fresh process's first: the known set is loaded from the database
        _touch_many(directory, next_file, NEW)
        next_file += NEW
        files_known.known_files_forget()
        seconds, new = _timed(lambda: files.directory_discover(connector=connector))
        assert new == NEW, new
        rows["cold"].append(seconds)
    loads.append(os.getloadavg()[0])

    # every known file registered within the recheck window: rechecked a slice per scan
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE inventory_asset SET discovered_at = now() WHERE connector_id = %s",
            [connector.pk],
        )
    files_known.known_files_forget()
    files.directory_discover(connector=connector)
    recent, bare_recent = [], []
    for _ in range(ROUNDS):
        loads.append(os.getloadavg()[0])
        _touch_many(directory, next_file, NEW)
        next_file += NEW
        bare_recent.append(_bare(directory))
        seconds, new = _timed(lambda: files.directory_discover(connector=connector))
        assert new == NEW
        recent.append(seconds)
    rows["bare_recent"], rows["recent"] = bare_recent, recent

    # registration rate: batches of new files landing at once, registered by one scan each
    registered, spent = 0, 0.0
    for _ in range(REG_BATCHES):
        _touch_many(directory, next_file, REG_BATCH)
        next_file += REG_BATCH
        seconds, new = _timed(lambda: files.directory_discover(connector=connector))
        assert new == REG_BATCH, new
        registered += new
        spent += seconds
    loads.append(os.getloadavg()[0])
    bare_ms = _median_ms(rows["bare"])
    bare_stat_ms = _median_ms(rows["bare_stat"])
    warm_ms = _median_ms(rows["warm"])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), max(id) - min(id) + 1 FROM inventory_asset WHERE connector_id = %s",
            [connector.pk],
        )
        count, span = cursor.fetchone()
    return {
        "known": KNOWN,
        "new": NEW,
        "rounds": ROUNDS,
        "first_registration_s": round(first_scan_s, 2),
        "bare_ms": bare_ms,
        "bare_stat_ms": bare_stat_ms,
        "warm_ms": warm_ms,
        "none_ms": _median_ms(rows["none"]),
        "cold_ms": _median_ms(rows["cold"]),
        "recent_ms": _median_ms(recent),
        "bare_recent_ms": _median_ms(bare_recent),
        "ratio_recent": round(_median_ms(recent) / _median_ms(bare_recent), 2),
        "registered": registered,
        "reg_batch": REG_BATCH,
        "files_per_hour": round(registered / spent * 3600),
        "ratio_bare": round(warm_ms / bare_ms, 2),
        "ratio_bare_stat": round(warm_ms / bare_stat_ms, 2),
        "samples_ms": {k: [round(v * 1000, 1) for v in vals] for k, vals in rows.items()},
        "assets": count,
        "id_span": span,
        "load": [round(x, 1) for x in loads],
        "files_in_directory": next_file,
    }


def _verdict(f: dict) -> str:
    outside, inside = f["ratio_bare"], f["ratio_recent"]
    if outside <= 1.5 and inside <= 1.5:
        return (
            f"A warm scan with 100 new files is {outside}x a names-only scandir outside the "
            f"recheck window and {inside}x inside it: the 1.5x target is met in both cases."
        ) + _noise(f)
    return (
        f"A warm scan with 100 new files is {outside}x a names-only scandir outside the "
        f"recheck window and {inside}x inside it: the 1.5x target is **MISSED** where above 1.5x."
        + _noise(f)
    )


def _noise(f: dict) -> str:
    if max(f["load"]) <= 4:
        return ""
    return (
        f" This run saw a load average of up to {max(f['load'])} on 2 cores, so every figure is "
        "far above a quiet machine's and the ratios are noisy: the same names-only scandir "
        f"measured {f['bare_ms']} ms in the first rounds and {f['bare_recent_ms']} ms in the "
        "recheck-window rounds."
    )


def write(f: dict) -> None:
    met = f["ratio_bare"] <= 1.5
    rows = [
        ["bare `os.scandir` (names)", f"{f['bare_ms']} ms", "1.00x"],
        ["bare `os.scandir` + `stat` per file", f"{f['bare_stat_ms']} ms", ""],
        [
            f"Tidemark `directory_discover`, {f['new']} new (warm process)",
            f"{f['warm_ms']} ms",
            f"{f['ratio_bare']}x (target <= 1.5x: {'met' if met else '**MISSED**'})",
        ],
        ["Tidemark, nothing new", f"{f['none_ms']} ms", ""],
        [
            f"Tidemark, {f['new']} new, first scan of a process (known set loaded)",
            f"{f['cold_ms']} ms",
            f"{round(f['cold_ms'] / f['bare_ms'], 2)}x",
        ],
        [
            "bare `os.scandir` (names), rounds of the next row",
            f"{f['bare_recent_ms']} ms",
            "1.00x",
        ],
        [
            f"Tidemark, {f['new']} new, every known file within `recheck_seconds` "
            "(a slice of 1,000 rechecked per scan)",
            f"{f['recent_ms']} ms",
            f"{f['ratio_recent']}x (target <= 1.5x: "
            f"{'met' if f['ratio_recent'] <= 1.5 else '**MISSED**'})",
        ],
    ]
    rate_met = f["files_per_hour"] >= 1_000_000
    markdown = (
        "## Discovery: 100 new files among 50,000 known\n\n"
        f"Measured {common.now_utc()} by `bench/bench_discovery.py`: one `files` connector over one "
        f"flat directory of {f['known']:,} registered files; each of {f['rounds']} rounds adds "
        f"{f['new']} files and times the systems one after the other (medians below). The known "
        "files were registered 2 hours before (outside the 1-hour `recheck_seconds` window); the "
        "last two rows put all of them inside it (alternating with a bare scandir in the same "
        "rounds); each scan then stats a slice of `recheck_per_scan` (1,000) of them, taken by a "
        "cursor that goes round the window, "
        "so a rewrite is found within ceil(files in window / 1,000) scans. File mtimes are older than `settle_seconds`, so no "
        "stability probe sleeps.\n\n"
        + common.table(["measure", "median", "vs bare scandir"], rows)
        + f"\n\nAgainst the issue's baseline, a bare scandir + stat of the directory (what it "
        f"measured as 0.24 s against 1.6 s, 6.6x): {f['ratio_bare_stat']}x, "
        f"{'met' if f['ratio_bare_stat'] <= 1.5 else '**MISSED**'}. "
        + _verdict(f)
        + " Where the time of a warm scan goes (a profiling harness on a quiet machine, medians "
        "of 15 scans with 100 new among 50,000, every known file in the window; the bare "
        "scandir took 14-15 ms there): the listing (`os.listdir`, 11-12 ms), the names not yet "
        "known (`set(listing) - known`, about 5 ms: the 50,000 known names are the one "
        "structure the scan reads that a bare scandir does not, and they are out of the CPU "
        "cache at each scan; a process's first load copies them next to one another, which "
        "took a third off this step, measured alternating in one process), the copy's check (one index lookup of the connector's last asset, "
        "its id and `cum_count`, plus the rows above the last id seen: 1 ms), an `lstat`, a "
        "`stat` and a pattern match per new file (0.7 ms), the recheck of 1,000 recent files "
        "(1.7 ms, the only part that depends on the window: one `stat` per file, and a loop of "
        "bare `os.stat` calls over the same 1,000 files costs the same), the registration "
        "(connector row lock 0.5 ms, one `INSERT ... SELECT unnest(...)` 1.8 ms, commit 0.9 ms). "
        "Since 2026-11-28 (migration 0041) the registration is one call of "
        "`tidemark_assets_register`, whose plans the session keeps (the INSERT sent by the "
        "driver was planned at every scan, 0.7 ms), the prefix-sum trigger is no longer called "
        "for rows that carry their sums (0.4 ms per 100 rows), and the rows the call returns are "
        "added to the process's copy when it commits, so the next scan's check of the copy is "
        "one index lookup instead of also reading those 100 rows back (measured in the "
        "benchmark's process: 2.3 -> 0.7-1.0 ms). Measured on its own with psycopg2, the call "
        "for 100 new files in autocommit takes 2.9 ms, of which about 1.3 ms are the foreign "
        "key's per-row checks of the connector at commit (1.6 ms in a scratch copy without the "
        "constraint, which stays). The rest of the gap to 1.5x is the set difference and the "
        "registration, which a names-only scandir does not do. "
        "Before this change (commit d1371f1, run on this machine on 2026-11-27 05:50 UTC, load "
        "up to 6.6): bare scandir 15.3 ms, warm scan 32.5 ms (2.12x), first scan of a process "
        "155.8 ms, and within the window 81.4 ms against a bare 22.9 ms (3.55x; that run was "
        "noisy, and the 49 ms the window added there were not all broken down). Measured parts "
        "of it: the copy was checked by a `count(*)` over the connector's assets, which reads "
        "them all and, after the window's rows were updated, their heap pages too (EXPLAIN "
        "ANALYZE at 50,000: 5.6 ms vacuumed, 9.1 ms after the update; the last asset's "
        "`cum_count` now: 0.02 ms); the walk's filter called `__contains__` per name (8.8 ms "
        "with the known set out of the cache, 5.3 ms as a set difference); and the "
        "registration's `NOT EXISTS` became a hash anti-join over every asset of the connector "
        "when the statistics were stale (7.6 ms; now a probe per new location, 0.7 ms). "
        f"The first registration of all {f['known']:,} files took {f['first_registration_s']} s. "
        f"After every scan, {f['assets']:,} assets span {f['id_span']:,} ids (no id spent on a "
        "known location). Load average (1 min) during the rounds: "
        f"{', '.join(str(x) for x in f['load'])} (2 cores shared with other work).\n\n"
        f"Registration rate: {f['registered']:,} new files landing in batches of "
        f"{f['reg_batch']:,}, one scan each, on top of the known ones: "
        f"{f['files_per_hour']:,} files/hour "
        f"(target >= 1,000,000: {'met' if rate_met else '**MISSED**'}).\n\n"
        f"Samples (ms): {json.dumps(f['samples_ms'])}\n"
    )
    common.write_section("discovery", markdown, f)
    print(json.dumps(f, indent=2))


if __name__ == "__main__":
    sys.exit(main())
