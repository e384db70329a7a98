"""The calls an acquire makes on its hot path (migration 0051, issue 48).

Every acquire takes over its job's expired leases (tidemark_reap_expired, under the job's row
lock); it calls the reaper only when a probe finds an expired lease, and still reaps one at once.
One batch over an item query is cut by tidemark_plan_one directly. Counted with PostgreSQL's
per-transaction function statistics (track_functions), in the test's transaction.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from inventory.models import Batch, BatchStatus
from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job


def _calls(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_stat_get_xact_function_calls(p.oid)), 0) FROM pg_proc AS p "
            "WHERE p.proname = %s",
            [name],
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def tracked():
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL track_functions = 'all'")


@pytest.mark.django_db
def test_acquire_calls_the_reaper_only_when_a_lease_expired(tracked):
    connector = ConnectorFactory()
    make_assets(connector, [10] * 3)
    job = make_job(connector=connector, batch_weight=10, max_items=1)

    first = lifecycle.batch_acquire(job=job, worker="w1")
    lifecycle.batch_acquire(job=job, worker="w2")
    assert _calls("tidemark_acquire") == 2
    assert _calls("tidemark_reap_expired") == 0

    Batch.objects.filter(pk=first.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    third = lifecycle.batch_acquire(job=job, worker="w3")
    assert third is not None and third.pk != first.pk
    assert _calls("tidemark_reap_expired") == 1
    first.refresh_from_db()
    assert first.status == BatchStatus.FAILED
    assert first.error["type"] == "LeaseExpired"


@pytest.mark.django_db
def test_one_batch_over_an_item_query_is_cut_without_the_multi_batch_planner(tracked):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE public.hot_meta (uid bigint PRIMARY KEY, item text, weight int)"
        )
        cursor.execute(
            "INSERT INTO public.hot_meta SELECT g, 'f' || g, 10 FROM generate_series(1, 5) AS g"
        )
    connector = ConnectorFactory(config={"meta_table": {"table": "public.hot_meta"}})
    job = make_job(connector=connector, batch_weight=20, max_items=10)

    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert (batch.span.upper, batch.item_count, batch.weight) == (3, 2, 20)
    assert _calls("tidemark_plan_one") == 1
    assert _calls("tidemark_plan_batches") == 0
