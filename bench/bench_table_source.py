"""Benchmark: a `table` connector planned by a timestamp column over 10,000,000 rows.

The claim: the cost of finding, registering and planning one more batch does not grow with the
table. Two source tables live in a database of their own on the settings' PostgreSQL server
(`tidemark_bench_source`): `events_big` (10,000,000 rows; BENCH_QUICK=1: 1,000,000) and
`events_small` (100,000 rows), both `(id bigint, ts timestamptz, amount int)` with an index on
`ts`, one row every 10 ms. Tidemark's own tables are in `tidemark_bench_table`. Each table has a
connector (`slice_rows` 10,000) and a job (`batch_weight` 10,000 rows), both fully discovered and
planned once (the initial load, timed too).

Then, round after round, 10,000 new rows land in each table and three steps are timed, the two
tables alternating within a round so they see the same machine load:

- discovery: `discover()` of the connector (source max, one slice query, registration);
- plan + commit: `batch_acquire` + `batch_succeed` of the one new batch (the SQL planner);
- baseline: `SELECT count(*) FROM <table> WHERE ts > <the job's last planned value>` followed by
  the same count over the whole table: what a planner that sizes batches by counting pays.

Reported: medians, and the ratio big/small of each step (target: about 1).
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

SOURCE_DB = "tidemark_bench_source"
CONTROL_DB = "tidemark_bench_table"
BIG = 1_000_000 if common.QUICK else 10_000_000
SMALL = 100_000
NEW = 10_000
ROUNDS = 3 if common.QUICK else 7
ENV = "TM_BENCH_TABLE_SOURCE_DSN"


def _dsn(db: dict, name: str) -> str:
    params = common.psycopg2_params(db, name)
    return " ".join(f"{key}='{value}'" for key, value in params.items())


def _load(conn, table: str, rows: int) -> float:
    started = time.perf_counter()
    with conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, ts timestamptz, amount int)")
        cursor.execute(
            f"INSERT INTO {table} SELECT g, timestamptz '2026-01-01' + g * interval '10 ms', "
            "g %% 1000 FROM generate_series(1, %s) AS g",
            [rows],
        )
        cursor.execute(f"CREATE INDEX ON {table} (ts)")
        cursor.execute(f"ANALYZE {table}")
    return time.perf_counter() - started


def _append(conn, table: str, after: int) -> None:
    with conn.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} SELECT g, timestamptz '2026-01-01' + g * interval '10 ms', "
            "g %% 1000 FROM generate_series(%s, %s) AS g",
            [after + 1, after + NEW],
        )


def _timed(call):
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def _ms(values) -> float:
    return round(statistics.median(values) * 1000, 2)


def main() -> int:
    import psycopg2

    base = common.base_database()
    common.recreate_database(base, SOURCE_DB)
    common.recreate_database(base, CONTROL_DB)
    os.environ[ENV] = _dsn(base, SOURCE_DB)
    source = psycopg2.connect(**common.psycopg2_params(base, SOURCE_DB))
    source.autocommit = True
    try:
        load_s = {
            "big": _load(source, "events_big", BIG),
            "small": _load(source, "events_small", SMALL),
        }
        import django
        from django.conf import settings

        settings.DATABASES["default"]["NAME"] = CONTROL_DB
        # the connectors name the source database's variable and its server
        # (a unix-socket directory, the embedded server's, is written postgresql:///dir)
        common.allow(
            credentials=[ENV], endpoints=[f"postgresql://{base.get('HOST') or 'localhost'}"]
        )
        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        figures = measure(source, load_s)
    finally:
        source.close()
        if os.environ.get("BENCH_KEEP") != "1":
            from django.db import connections

            connections.close_all()
            common.drop_database(base, SOURCE_DB)
            common.drop_database(base, CONTROL_DB)
    write(figures)
    return 0


def measure(source, load_s: dict) -> dict:
    from inventory.services import lifecycle
    from inventory.services.connectors import connector_create
    from inventory.services.discovery import discover
    from inventory.services.jobs import job_create

    rows = {"big": BIG, "small": SMALL}
    jobs, connectors, initial = {}, {}, {}
    for name in ("big", "small"):
        connector = connector_create(
            name=f"events-{name}",
            kind="table",
            config={"dsn_env": ENV, "table": f"events_{name}", "column": "ts", "slice_rows": NEW},
        )
        started = time.perf_counter()
        slices = 0
        while (found := discover(connector)) > 0:
            slices += found
        discover_s = time.perf_counter() - started
        job = job_create(
            name=f"copy-{name}", connector=connector, batch_weight=NEW, max_items=1, executor="warm"
        )
        started = time.perf_counter()
        batches = 0
        while (batch := lifecycle.batch_acquire(job=job, worker="bench")) is not None:
            lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
            batches += 1
        plan_s = time.perf_counter() - started
        initial[name] = {
            "slices": slices,
            "discover_s": round(discover_s, 2),
            "per_slice_ms": round(discover_s * 1000 / max(slices, 1), 2),
            "batches": batches,
            "plan_commit_s": round(plan_s, 2),
            "per_batch_ms": round(plan_s * 1000 / max(batches, 1), 2),
        }
        jobs[name], connectors[name] = job, connector

    steps = {name: {"discover": [], "plan": [], "count": []} for name in rows}
    loads = []
    for _ in range(ROUNDS):
        loads.append(os.getloadavg()[0])
        for name in ("big", "small"):
            _append(source, f"events_{name}", rows[name])
            rows[name] += NEW
        for name in ("big", "small"):
            seconds, found = _timed(lambda name=name: discover(connectors[name]))
            assert found == 1, found
            steps[name]["discover"].append(seconds)
        for name in ("big", "small"):

            def plan(name=name):
                batch = lifecycle.batch_acquire(job=jobs[name], worker="bench")
                lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
                return batch

            seconds, batch = _timed(plan)
            assert batch.weight == NEW, batch.weight
            steps[name]["plan"].append(seconds)
        for name in ("big", "small"):

            def count(name=name):
                with source.cursor() as cursor:
                    cursor.execute(
                        f"SELECT count(*) FROM events_{name} WHERE ts > "  # noqa: S608
                        "timestamptz '2026-01-01' + %s * interval '10 ms'",
                        [rows[name] - NEW],
                    )
                    cursor.execute(f"SELECT count(*) FROM events_{name}")  # noqa: S608
                    return cursor.fetchone()[0]

            seconds, _ = _timed(count)
            steps[name]["count"].append(seconds)
    medians = {name: {step: _ms(values) for step, values in s.items()} for name, s in steps.items()}
    return {
        "rows": {"big": BIG, "small": SMALL},
        "load_s": {k: round(v, 1) for k, v in load_s.items()},
        "initial": initial,
        "medians_ms": medians,
        "ratio_big_small": {
            step: round(medians["big"][step] / medians["small"][step], 2)
            for step in ("discover", "plan", "count")
        },
        "rounds": ROUNDS,
        "load_avg": round(statistics.mean(loads), 2),
    }


def write(figures: dict) -> None:
    m, r, i = figures["medians_ms"], figures["ratio_big_small"], figures["initial"]
    big, small = figures["rows"]["big"], figures["rows"]["small"]
    verdict = "met" if max(r["discover"], r["plan"]) <= 1.5 else "**missed**"
    markdown = f"""## Table source: planning by a timestamp column over {big:,} rows

Measured {common.now_utc()} by `bench/bench_table_source.py` ({figures["rounds"]} rounds, load
average {figures["load_avg"]}). Source tables `(id, ts timestamptz, amount)` with an index on `ts`,
{big:,} and {small:,} rows (loaded in {figures["load_s"]["big"]} s and {
        figures["load_s"]["small"]
    } s);
`slice_rows` and `batch_weight` 10,000. Each round 10,000 rows land in both tables; the steps
alternate between the tables.

{
        common.table(
            ["step (median per new batch)", f"{big:,} rows", f"{small:,} rows", "ratio big/small"],
            [
                [
                    "discovery: source max, one slice query, registration",
                    f"{m['big']['discover']} ms",
                    f"{m['small']['discover']} ms",
                    f"{r['discover']}x",
                ],
                [
                    "plan + commit (`batch_acquire` + `batch_succeed`)",
                    f"{m['big']['plan']} ms",
                    f"{m['small']['plan']} ms",
                    f"{r['plan']}x",
                ],
                [
                    "baseline: count(*) of the new rows and of the table",
                    f"{m['big']['count']} ms",
                    f"{m['small']['count']} ms",
                    f"{r['count']}x",
                ],
            ],
        )
    }

Target "cost per batch does not grow with the table" (ratio about 1, at most 1.5): {verdict}. The
initial load of the big table: {i["big"]["slices"]:,} slices discovered in {
        i["big"]["discover_s"]
    } s
({i["big"]["per_slice_ms"]} ms per slice), {i["big"]["batches"]:,} batches planned and committed in
{i["big"]["plan_commit_s"]} s ({i["big"]["per_batch_ms"]} ms per batch); the small table:
{i["small"]["per_slice_ms"]} ms per slice, {i["small"]["per_batch_ms"]} ms per batch.
"""
    common.write_section("table_source", markdown, figures)


if __name__ == "__main__":
    common.setup_django_path()
    sys.exit(main())
