"""Incremental planning: budgets and caps, planning after the last live batch, holes, new items,
and the conditions under which a job takes no work."""

import pytest

from inventory.models import Batch, BatchStatus, ConnectorState, Watermark
from inventory.services import lifecycle
from inventory.services.assets import assets_register
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.planning import incremental_start, plan_closed_range, plan_step
from inventory.sources.items import assets_source
from tests.support.factories import ConnectorFactory, make_assets, make_job


def _span(batch):
    return batch.span.lower, batch.span.upper


@pytest.mark.django_db
def test_a_batch_takes_items_while_they_fit_the_budget_and_the_cap():
    connector = ConnectorFactory()
    ids = [a.id for a in make_assets(connector, [40, 40, 40, 40, 1, 1, 1, 1, 1])]
    job = make_job(connector=connector, batch_weight=100, max_items=3)

    taken = [lifecycle.batch_acquire(job=job, worker="w") for _ in range(4)]
    # 40+40 (a third 40 exceeds 100); 40+40+1 (the cap); 1+1+1 (the cap); the last 1
    assert [(b.item_count, b.weight) for b in taken] == [(2, 80), (3, 81), (3, 3), (1, 1)]
    assert [_span(b) for b in taken] == [
        (job.start_position, ids[1] + 1),
        (ids[1] + 1, ids[4] + 1),
        (ids[4] + 1, ids[7] + 1),
        (ids[7] + 1, ids[8] + 1),
    ]
    assert lifecycle.batch_acquire(job=job, worker="w") is None


@pytest.mark.django_db
def test_an_item_heavier_than_the_budget_is_a_batch_of_its_own():
    connector = ConnectorFactory()
    make_assets(connector, [1, 500, 1])
    job = make_job(connector=connector, batch_weight=10, max_items=10)
    taken = [lifecycle.batch_acquire(job=job, worker="w") for _ in range(3)]
    assert [(b.item_count, b.weight) for b in taken] == [(1, 1), (1, 500), (1, 1)]


@pytest.mark.django_db
def test_planning_continues_after_the_last_live_batch_not_after_the_watermark():
    connector = ConnectorFactory()
    make_assets(connector, [10] * 3)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    first = lifecycle.batch_acquire(job=job, worker="a")
    second = lifecycle.batch_acquire(job=job, worker="b")
    assert Watermark.objects.get(job=job).position == job.start_position
    assert second.span.lower == first.span.upper
    assert incremental_start(job_id=job.pk) == (second.span.upper, None)


@pytest.mark.django_db
def test_new_items_are_planned_from_where_the_last_batch_ended():
    connector = ConnectorFactory()
    make_assets(connector, [1, 1])
    job = make_job(connector=connector, batch_weight=100, max_items=100)
    first = lifecycle.batch_acquire(job=job, worker="w")
    assert lifecycle.batch_acquire(job=job, worker="w") is None

    assets_register(connector=connector, items=[("/late/a", 1, {}), ("/late/b", 1, {})])
    second = lifecycle.batch_acquire(job=job, worker="w")
    assert (second.span.lower, second.item_count) == (first.span.upper, 2)


@pytest.mark.django_db
def test_items_before_the_start_position_are_never_planned():
    connector = ConnectorFactory()
    ids = [a.id for a in make_assets(connector, [1] * 4)]
    job = make_job(connector=connector, batch_weight=100, max_items=100, start_position=ids[2])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert (_span(batch), batch.item_count) == ((ids[2], ids[3] + 1), 2)


@pytest.mark.django_db
def test_a_scheduled_run_queues_batches_that_acquire_then_takes_in_order():
    connector = ConnectorFactory()
    make_assets(connector, [10] * 5)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    queued = lifecycle.batches_plan(job=job, limit=3)
    assert [b.status for b in queued] == [BatchStatus.QUEUED] * 3
    assert [b.span.lower for b in queued[1:]] == [b.span.upper for b in queued[:-1]]

    taken = [lifecycle.batch_acquire(job=job, worker="w") for _ in range(4)]
    assert [b.id for b in taken[:3]] == [b.id for b in queued]
    assert taken[3].span.lower == queued[-1].span.upper


@pytest.mark.django_db
def test_a_hole_left_by_a_cancelled_batch_is_filled_first_and_exactly():
    connector = ConnectorFactory()
    ids = [a.id for a in make_assets(connector, [5, 5, 5, 5])]
    job = make_job(connector=connector, batch_weight=10, max_items=10)
    first = lifecycle.batch_acquire(job=job, worker="w")
    second = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_cancel(batch_id=first.id, actor="ops", reason="bad config")
    assert incremental_start(job_id=job.pk) == _span(first)

    # a budget that would reach past the hole still stops at its end
    job.batch_weight = 1000
    job.save(update_fields=["batch_weight"])
    refill = lifecycle.batch_acquire(job=job, worker="w")
    assert (_span(refill), refill.item_count) == (_span(first), 2)
    assert second.span.lower == ids[1] + 1


@pytest.mark.django_db
def test_a_bounded_plan_step_stops_at_the_bound():
    connector = ConnectorFactory()
    ids = [a.id for a in make_assets(connector, [1] * 6)]
    source = assets_source(connector.pk)
    step = plan_step(source=source, lower=ids[1], upper=ids[4], budget=100, max_items=100)
    assert (step.lower, step.upper, step.item_count) == (ids[1], ids[4], 3)
    assert plan_step(source=source, lower=ids[4], upper=ids[4], budget=100, max_items=100) is None
    assert plan_step(source=source, lower=ids[-1] + 1, upper=None, budget=1, max_items=1) is None


@pytest.mark.django_db
def test_a_closed_range_that_ends_before_it_starts_is_refused():
    connector = ConnectorFactory()
    with pytest.raises(InvalidInput) as refused:
        plan_closed_range(
            source=assets_source(connector.pk), first=10, last=9, budget=1, max_items=1
        )
    assert refused.value.field == "range_end"


@pytest.mark.django_db
def test_a_paused_job_or_connector_takes_no_work():
    connector = ConnectorFactory()
    make_assets(connector, [1])
    job = make_job(connector=connector, paused=True)
    with pytest.raises(Conflict, match="paused"):
        lifecycle.batch_acquire(job=job, worker="w")

    other = make_job(connector=connector)
    connector.state = ConnectorState.PAUSED
    connector.save(update_fields=["state"])
    with pytest.raises(Conflict, match="paused"):
        lifecycle.batch_acquire(job=other, worker="w")
    assert not Batch.objects.filter(job__in=[job, other]).exists()


@pytest.mark.django_db
def test_acquiring_needs_a_worker_name():
    connector = ConnectorFactory()
    make_assets(connector, [1])
    job = make_job(connector=connector)
    with pytest.raises(InvalidInput) as refused:
        lifecycle.batch_acquire(job=job, worker="")
    assert refused.value.field == "worker"
    assert not Batch.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_a_batch_keeps_a_snapshot_of_the_config_it_was_planned_with():
    connector = ConnectorFactory()
    make_assets(connector, [1, 1])
    job = make_job(connector=connector, batch_weight=1, max_items=1, params={"mode": "a"})
    batch = lifecycle.batch_acquire(job=job, worker="w")
    job.params = {"mode": "b"}
    job.save(update_fields=["params"])
    assert Batch.objects.get(pk=batch.id).config_snapshot["params"] == {"mode": "a"}
    assert Batch.objects.get(pk=batch.id).config_snapshot["batch_weight"] == 1


@pytest.mark.django_db
def test_a_plan_step_prepares_its_statement_once_and_again_after_a_deallocate():
    """The item walk (a meta table's planner) prepares its dynamic item query once per session;
    here over assets with their prefix sums set aside, so the walk is what plans them."""
    from dataclasses import replace

    from django.db import connection

    connector = ConnectorFactory()
    ids = [a.id for a in make_assets(connector, [5, 5, 5])]
    source = replace(assets_source(connector.pk), prefix_sums_of=None)

    def step():
        return plan_step(source=source, lower=ids[0], upper=None, budget=10, max_items=5)

    first = step()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'tidemark_%'")
        (prepared,) = cursor.fetchone()
    assert prepared >= 1
    assert step() == first  # the same statement, not one more
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'tidemark_%'")
        assert cursor.fetchone()[0] == prepared
        cursor.execute("DEALLOCATE ALL")  # what a pooler's DISCARD ALL does to the session
    assert step() == first
    assert (first.lower, first.upper, first.item_count, first.weight) == (ids[0], ids[1] + 1, 2, 10)


@pytest.mark.django_db
def test_the_sources_planned_by_prefix_sums_are_the_ones_whose_lag_is_read_from_them():
    """Two readers of one rule: Python plans by prefix sums the sources whose items are the
    connector's assets (ItemSource.prefix_sums_of), SQL's incremental planner the jobs whose lag is
    not counted outside them (tidemark_job_assets -> tidemark_lag_outside). Every kind of source
    agrees, so acquire, a plan step and a backfill plan cut the same ranges."""
    from django.db import connection

    from inventory.sources.registry import source_for_connector

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE public.events_meta (uid bigint, item text, weight int)")
    upstream = make_job(name="up")
    configs = {
        "files": ("files", {"path": "/data/landing"}),
        "local meta table": ("files", {"meta_table": {"table": "public.events_meta"}}),
        "remote meta table (mirrored)": (
            "files",
            {"meta_table": {"table": "public.events_meta"}, "dsn_env": "TM_META_DSN"},
        ),
        "job_output": ("job_output", {"job": upstream.name}),
        "table": ("table", {"dsn_env": "TM_DSN", "table": "public.orders", "column": "id"}),
        "kafka": ("kafka", {"bootstrap_servers": "127.0.0.1:9092", "topic": "orders"}),
        "delta": ("delta", {"path": "/data/delta"}),
    }
    watermark_types = {"kafka": "key_value", "delta": "key_value"}
    seen = {}
    for label, (kind, config) in configs.items():
        connector = ConnectorFactory(kind=kind, config=config)
        options = {"watermark_type": watermark_types[kind]} if kind in watermark_types else {}
        job = make_job(connector=connector, **options)
        with connection.cursor() as cursor:
            cursor.execute("SELECT tidemark_job_assets(%s)", [job.pk])
            by_sql = cursor.fetchone()[0]
        by_python = source_for_connector(connector).prefix_sums_of
        assert by_python == by_sql, label
        seen[label] = by_sql is not None
    assert seen == {
        "files": True,
        "local meta table": False,
        "remote meta table (mirrored)": True,
        "job_output": False,
        "table": True,
        "kafka": True,
        "delta": True,
    }
