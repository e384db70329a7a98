"""A job's lag and a connector's last asset are a few index steps however the connectors' assets
interleave (schema/prefix_sums.sql: tidemark_asset_before, tidemark_lag).

Written as "connector_id = C AND id < X ORDER BY id DESC LIMIT 1", the planner walked the primary
key backwards and filtered out every asset of the other connectors in between: a connector whose
assets are sparse among a busy one's cost a scan of the busy one's assets per lookup (1.6 s for
200 jobs in a scratch database). Shown here by the pages each statement reads (EXPLAIN BUFFERS),
not by a time.
"""

import pytest
from django.db import connection

from inventory.models import Watermark
from inventory.sql import dashboard_query, query
from tests.support.factories import ConnectorFactory, make_job
from tests.support.query_plans import plan_of

pytestmark = pytest.mark.django_db

BUSY = 20_000  # assets of another connector between the sparse connector's two
PAGES = 60  # a few index and heap pages; the walk through BUSY assets reads hundreds
# job_health's parameters (selectors_health.Health.params) with no job read outside prefix sums
HEALTH_PARAMS = {
    "ext_ids": [],
    "ext_items": [],
    "ext_weights": [],
    "stale": 3,
    "states": ["blocked", "late", "failing", "unreadable", "connector", "paused"],
    "ids": None,  # every job
}


def _insert(connector_id: int, count: int, first_cum: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_asset"
            " (connector_id, location, weight, extra, discovered_at, cum_count, cum_weight)"
            " SELECT %s, 'f-' || (%s + g), 10, '{}', now(), %s + g, (%s + g) * 10"
            " FROM generate_series(1, %s) AS g",
            [connector_id, first_cum, first_cum, first_cum, count],
        )


@pytest.fixture
def sparse_job():
    """A job on a connector with one asset, then BUSY assets of another connector, then the
    sparse connector's second asset; the job's watermark is at that second one (lag 1)."""
    sparse, busy = ConnectorFactory(), ConnectorFactory()
    _insert(sparse.pk, 1, 0)
    _insert(busy.pk, BUSY, 0)
    _insert(sparse.pk, 1, 1)
    job = make_job(connector=sparse)
    second = sparse.assets.order_by("-id").values_list("id", flat=True).first()
    Watermark.objects.filter(job=job).update(position=second)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE inventory_asset")
    return job


def _pages(sql: str, params) -> int:
    """Shared pages (hit or read) the statement's plan touched."""
    top = plan_of(sql, params, "ANALYZE, BUFFERS, ")
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


def test_a_jobs_lag_reads_a_few_pages_whatever_lies_between_its_assets(sparse_job):
    with connection.cursor() as cursor:
        cursor.execute(query("jobs_lag"), {"ids": [sparse_job.pk]})
        assert cursor.fetchall() == [(sparse_job.pk, 1, 10)]
    assert _pages(query("jobs_lag"), {"ids": [sparse_job.pk]}) < PAGES


def test_the_last_asset_of_a_connector_reads_a_few_pages_whatever_came_after_it(sparse_job):
    # the sparse connector's last asset lies below the busy one's newer ones
    _insert(ConnectorFactory().pk, BUSY, 0)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE inventory_asset")
    params = {"connector": sparse_job.connector_id}
    with connection.cursor() as cursor:
        cursor.execute(query("assets_known_size"), params)
        assert cursor.fetchone()[0] == 2
    assert _pages(query("assets_known_size"), params) < PAGES


@pytest.fixture
def no_dead_rows():
    """Empty inventory tables, truncated: this statement reads every job, watermark and open
    batch whole, and the rows that other tests of this process rolled back stay in those tables'
    pages as dead rows (the graph's test leaves 1,000 jobs' worth), which would be counted
    as if the statement walked assets."""
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE inventory_asset, inventory_batch, inventory_watermark, inventory_job, "
            "inventory_connector CASCADE"
        )


@pytest.mark.django_db(transaction=True)
def test_the_overview_reads_a_few_pages_per_job_whatever_lies_between_its_assets(
    no_dead_rows, sparse_job
):
    params = dict(HEALTH_PARAMS)
    sql = dashboard_query("health_all")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    (row,) = [r for r in rows if r[0] == sparse_job.pk]
    assert (row[18], row[19]) == (1, 10)  # lag items, weight
    assert _pages(sql, params) < PAGES


def _planned_rows(sql: str, params) -> float:
    return plan_of(sql, params)["Plan Rows"]


def test_the_statements_over_every_job_are_planned_at_one_row_per_job():
    """A lag is one row: planned as the 1,000 rows PostgreSQL assumes of a function it does not
    inline, /metrics' statement at 10,000 jobs was estimated at 10^10 rows, so the planner read the
    jobs in name order to spare itself the sort and joined each job to every job's open batches by
    a nested loop (9.7 s against 0.5 s; bench_dashboard)."""
    jobs = [make_job(connector=ConnectorFactory()) for _ in range(3)]
    for job in jobs:
        _insert(job.connector_id, 5, 0)
    with connection.cursor() as cursor:
        # statistics for every table the statements read, so the planner counts the jobs rather
        # than guessing from the pages other tests left
        for table in ("asset", "job", "connector", "watermark", "batch"):
            cursor.execute(f"ANALYZE inventory_{table}")
        cursor.execute("SELECT count(*) FROM inventory_job")
        (job_count,) = cursor.fetchone()
    params = dict(HEALTH_PARAMS)
    # a row per job, not jobs x 1,000 x 1,000
    assert _planned_rows(dashboard_query("health_all"), params) <= 10 * job_count
    window = {
        "q": "",
        "connector": "",
        "state": "",
        "limit": 50,
        "offset": 0,
        "alert_limit": 10,
        "alert_offset": 0,
        "reaper": 0,
    }
    assert _planned_rows(dashboard_query("health_read"), {**params, **window}) <= 10 * job_count
    ids = [job.pk for job in jobs]
    assert _planned_rows(query("jobs_lag"), {"ids": ids}) <= 10 * len(ids)  # not ids x 1,000


def test_metrics_rows_take_the_connectors_last_sums_once_and_agree_with_each_jobs_lag():
    """health_all (/metrics) reads each connector's last sums once (tips) and one probe per job
    behind; every job's lag there is the one tidemark_lag gives it alone (queries.sql: jobs_lag):
    jobs of one connector at its start, in its middle, at its end and past it, and a job of a
    connector with no asset."""
    from inventory import selectors_health

    shared, empty = ConnectorFactory(), ConnectorFactory()
    _insert(shared.pk, 7, 0)  # weights 10 each
    ids = list(shared.assets.order_by("id").values_list("id", flat=True))
    positions = [0, ids[2], ids[6], ids[6] + 1, ids[6] + 1000]
    jobs = []
    for position in positions:
        job = make_job(connector=shared)
        Watermark.objects.filter(job=job).update(position=position)
        jobs.append(job)
    jobs.append(make_job(connector=empty))
    with connection.cursor() as cursor:
        cursor.execute(query("jobs_lag"), {"ids": [job.pk for job in jobs]})
        alone = {pk: (items, int(weight)) for pk, items, weight in cursor.fetchall()}
    rows = {row.id: row for row in selectors_health.Health().rows()}
    assert alone == {
        jobs[0].pk: (7, 70),
        jobs[1].pk: (5, 50),
        jobs[2].pk: (1, 10),
        jobs[3].pk: (0, 0),
        jobs[4].pk: (0, 0),
        jobs[5].pk: (0, 0),
    }
    for job in jobs:
        lag = rows[job.pk].lag
        assert (lag.items, lag.weight) == alone[job.pk], job


def test_the_state_of_a_few_jobs_reads_their_open_batches_and_connectors_only():
    """health_of (the API's page of jobs) reads the open batches of the jobs asked about and the
    last asset of their connectors, not every job's and connector's: at 10,000 jobs on one
    connector a page of 100 aggregated 40,000 open batches and probed 1,000 connectors. Shown by
    the rows the plan's nodes return (EXPLAIN ANALYZE), with the same states and lags as the
    statement over every job."""
    from inventory import selectors_health
    from inventory.models import Batch, BatchStatus
    from tests.support.query_plans import plan_nodes

    jobs = []
    for _ in range(6):
        connector = ConnectorFactory()
        _insert(connector.pk, 5, 0)
        job = make_job(connector=connector)
        Batch.objects.bulk_create(
            Batch(
                job=job,
                kind="incremental",
                status=status,
                span=(i, i + 1),
                item_count=1,
                weight=1,
                max_attempts=3,
            )
            for i, status in enumerate((BatchStatus.FAILED, BatchStatus.DEAD))
        )
        jobs.append(job)
    asked = [jobs[0].pk, jobs[3].pk]
    health = selectors_health.Health()
    found = health.of(asked)
    every = {row.id: row for row in health.rows()}
    assert found == {pk: (every[pk].state, every[pk].lag) for pk in asked}
    assert {state for state, _ in found.values()} == {"blocked"}

    plan = plan_of(dashboard_query("health_of"), health.params(ids=asked), "ANALYZE, ")
    nodes = list(plan_nodes(plan))
    batches = [node for node in nodes if node.get("Relation Name") == "inventory_batch"]
    assets = [node for node in nodes if node.get("Relation Name") == "inventory_asset"]
    assert batches and assets
    # the open batches of the two jobs asked about (two each), not the twelve of all six
    assert sum(node["Actual Rows"] * node["Actual Loops"] for node in batches) <= 2 * len(asked)
    # one probe of the last asset per connector of those jobs, not one per connector
    assert sum(node["Actual Loops"] for node in assets) <= len(asked)
