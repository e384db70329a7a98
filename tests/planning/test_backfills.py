"""Backfills: an exact plan over a closed id range, a preview that writes nothing, clear refusals,
and backfill batches that run in their own lane beside incremental work."""

import pytest
from django.db import connection

from inventory.models import Backfill, BackfillStatus, Batch, BatchKind, BatchStatus, Watermark
from inventory.services import lifecycle
from inventory.services.backfills import backfill_create, backfill_preview, backfill_set_status
from inventory.services.errors import Conflict, InvalidInput
from tests.support.factories import ConnectorFactory, make_assets, make_job
from tests.support.query_plans import plan_nodes, plan_of


def _setup(weights, **job_options):
    connector = ConnectorFactory()
    assets = make_assets(connector, weights)
    options = {"batch_weight": 10, "max_items": 3, **job_options}
    return make_job(connector=connector, **options), [a.id for a in assets]


def _nothing_written(job):
    return (
        not Backfill.objects.filter(job=job).exists() and not Batch.objects.filter(job=job).exists()
    )


@pytest.mark.django_db
def test_the_preview_is_the_exact_greedy_plan_and_writes_nothing():
    job, ids = _setup([4, 4, 4, 0, 0, 0, 25, 1, 9, 1])
    plan = backfill_preview(job=job, range_start=ids[0] - 5, range_end=ids[-1] + 5)

    assert [(p.item_count, p.weight) for p in plan] == [
        (2, 8),  # 4+4; a third 4 would exceed 10
        (3, 4),  # 4+0+0; the cap of 3 ends it
        (1, 0),  # 0; then 25 does not fit
        (1, 25),  # heavier than the budget: alone
        (2, 10),  # 1+9 = 10 exactly fits
        (1, 1),
    ]
    # contiguous: from range_start, each range right after the previous batch's last item, and
    # the last one closing the requested stretch
    last_items = [ids[1], ids[4], ids[5], ids[6], ids[8]]
    assert [p.lower for p in plan] == [ids[0] - 5] + [i + 1 for i in last_items]
    assert [p.upper for p in plan] == [i + 1 for i in last_items] + [ids[-1] + 6]
    assert _nothing_written(job)


@pytest.mark.django_db
def test_the_preview_can_use_its_own_budget_and_cap():
    job, ids = _setup([1] * 6)
    plan = backfill_preview(
        job=job, range_start=ids[0], range_end=ids[-1], batch_weight=100, max_items=4
    )
    assert [p.item_count for p in plan] == [4, 2]


@pytest.mark.django_db
def test_an_empty_range_is_refused_naming_the_field():
    job, ids = _setup([1, 1])
    with pytest.raises(InvalidInput) as refused:
        backfill_create(job=job, range_start=ids[1], range_end=ids[0])
    assert refused.value.field == "range_end"
    assert "empty" in refused.value.message
    assert _nothing_written(job)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"range_start": "1", "range_end": 5}, "range_start"),
        ({"range_start": 1, "range_end": None}, "range_end"),
        ({"range_start": 1, "range_end": 5, "batch_weight": 0}, "batch_weight"),
        ({"range_start": 1, "range_end": 5, "max_items": -1}, "max_items"),
        ({"range_start": 1, "range_end": 5, "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_malformed_backfill_arguments_are_refused_naming_the_field(arguments, field):
    job, _ = _setup([1, 1])
    with pytest.raises(InvalidInput) as refused:
        backfill_create(job=job, **arguments)
    assert refused.value.field == field
    assert _nothing_written(job)


@pytest.mark.django_db
def test_a_range_without_items_is_a_conflict():
    job, ids = _setup([1, 1])
    with pytest.raises(Conflict, match="no items"):
        backfill_create(job=job, range_start=ids[-1] + 1, range_end=ids[-1] + 100)
    assert _nothing_written(job)


@pytest.mark.django_db
def test_a_backfill_reprocesses_committed_items_in_its_own_lane_without_touching_the_watermark():
    job, ids = _setup([5] * 4, batch_weight=10, max_items=10)
    while (batch := lifecycle.batch_acquire(job=job, worker="w")) is not None:
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    watermark_before = Watermark.objects.values_list("position", "value").get(job=job)

    backfill = backfill_create(
        job=job, range_start=ids[0], range_end=ids[-1], reason="fix", actor="alice"
    )
    planned = list(backfill.batches.order_by("span"))
    assert [(b.kind, b.status, b.item_count) for b in planned] == [
        (BatchKind.BACKFILL, BatchStatus.QUEUED, 2),
        (BatchKind.BACKFILL, BatchStatus.QUEUED, 2),
    ]

    for _ in planned:
        batch = lifecycle.batch_acquire(job=job, worker="w")
        assert batch.backfill_id == backfill.pk
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    assert lifecycle.batch_acquire(job=job, worker="w") is None
    assert Backfill.objects.get(pk=backfill.pk).status == BackfillStatus.COMPLETED
    assert Watermark.objects.values_list("position", "value").get(job=job) == watermark_before


@pytest.mark.django_db
def test_an_urgent_backfill_goes_first_within_its_concurrency_and_a_normal_one_after_live_work():
    job, ids = _setup([5] * 6, batch_weight=5, max_items=1)
    for _ in range(3):  # the backfills rework committed items; items 3-5 are live work
        done = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=done.id, attempt=done.attempt)
    urgent = backfill_create(
        job=job, range_start=ids[0], range_end=ids[1], priority=1, max_concurrency=1
    )
    later = backfill_create(job=job, range_start=ids[2], range_end=ids[2], priority=0)

    first = lifecycle.batch_acquire(job=job, worker="w")
    assert first.backfill_id == urgent.pk
    # the urgent backfill is at its max_concurrency: incremental work comes next
    second = lifecycle.batch_acquire(job=job, worker="w")
    assert second.kind == BatchKind.INCREMENTAL
    lifecycle.batch_succeed(batch_id=first.id, attempt=first.attempt)
    third = lifecycle.batch_acquire(job=job, worker="w")
    assert third.backfill_id == urgent.pk

    kinds = []
    while (batch := lifecycle.batch_acquire(job=job, worker="w")) is not None:
        kinds.append(batch.backfill_id)
    # the rest of the incremental items first, then the normal-priority backfill
    assert kinds == [None] * 2 + [later.pk]


@pytest.mark.django_db
def test_cancelling_a_backfill_cancels_its_waiting_batches():
    job, ids = _setup([5] * 4, batch_weight=5, max_items=1)
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[-1], priority=1)
    running = lifecycle.batch_acquire(job=job, worker="w")
    backfill_set_status(backfill=backfill, status=BackfillStatus.CANCELLED)

    statuses = dict(backfill.batches.values_list("id", "status"))
    assert statuses.pop(running.id) == BatchStatus.RUNNING
    assert set(statuses.values()) == {BatchStatus.CANCELLED}
    with pytest.raises(Conflict):
        backfill_set_status(backfill=backfill, status=BackfillStatus.RUNNING)


@pytest.mark.django_db
def test_a_backfill_whose_dead_batch_is_skipped_completes():
    job, ids = _setup([5, 5], batch_weight=5, max_items=1, max_attempts=1)
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[1], priority=1)
    first = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=first.id, attempt=first.attempt, error={"type": "Boom"})
    second = lifecycle.batch_acquire(job=job, worker="w")
    assert second.backfill_id == backfill.pk
    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)
    assert Backfill.objects.get(pk=backfill.pk).status == BackfillStatus.RUNNING  # one is dead

    lifecycle.batch_skip(batch_id=first.id, actor="alice", reason="source file gone")
    assert Backfill.objects.get(pk=backfill.pk).status == BackfillStatus.COMPLETED


@pytest.mark.django_db
def test_a_backfill_whose_last_open_batch_is_cancelled_completes():
    job, ids = _setup([5, 5], batch_weight=5, max_items=1)
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[1], priority=1)
    first = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=first.id, attempt=first.attempt)
    last = backfill.batches.get(status=BatchStatus.QUEUED)

    lifecycle.batch_cancel(batch_id=last.id, actor="alice", reason="not needed")
    assert Backfill.objects.get(pk=backfill.pk).status == BackfillStatus.COMPLETED


def _overlapping_open_batches(job):
    """Pairs of open batches (queued, running) of the job that cover a common item."""
    open_batches = list(
        Batch.objects.filter(job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING])
    )
    return [
        (a.pk, b.pk)
        for a in open_batches
        for b in open_batches
        if a.pk < b.pk and a.span.lower < b.span.upper and b.span.lower < a.span.upper
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("with_sink", [False, True])
def test_incremental_and_backfill_lanes_never_cover_the_same_item_at_once_in_either_order(
    with_sink, tmp_path
):
    """One overlap rule for every job, with a sink or processed outside Tidemark: a backfill is
    refused over items an open incremental batch holds, and an incremental batch is not planned
    over items an open backfill batch holds."""
    sink = {"kind": "files", "path": str(tmp_path / "sink")} if with_sink else {}
    connector = ConnectorFactory()
    assets = make_assets(connector, [1] * 4)
    job = make_job(connector=connector, batch_weight=1, max_items=1, sink=sink)

    # backfill first (after incremental work, priority -1), then acquire: the incremental lane
    # must not plan over the backfill's queued batches, so acquire hands out a backfill batch
    backfill = backfill_create(
        job=job, range_start=assets[0].id, range_end=assets[1].id, priority=-1, reason="r"
    )
    taken = lifecycle.batch_acquire(job=job, worker="external")
    assert taken.backfill_id == backfill.pk
    assert _overlapping_open_batches(job) == []
    assert not Batch.objects.filter(job=job, kind=BatchKind.INCREMENTAL).exists()

    # incremental first: a backfill over a running incremental batch is refused
    other = make_job(connector=connector, batch_weight=1, max_items=1, sink=sink)
    running = lifecycle.batch_acquire(job=other, worker="external")
    assert running.kind == BatchKind.INCREMENTAL
    with pytest.raises(Conflict):
        backfill_create(
            job=other, range_start=running.span.lower, range_end=running.span.lower, reason="r"
        )
    assert _overlapping_open_batches(other) == []


@pytest.mark.django_db
def test_the_planners_open_backfill_search_reads_no_other_jobs_batches():
    """At every acquire the incremental planner asks whether an open backfill batch of its job
    overlaps the range it plans (tidemark_open_backfill_starts). The jobs of one connector share
    its ids, so a search by the span alone read every job's batches over those items and dropped
    the other jobs' by a filter: a cost of every acquire that grew with the jobs reading a
    connector. It searches the exclusion constraint's index by the job, the lane and the span."""
    connector = ConnectorFactory()
    ids = [a.id for a in make_assets(connector, [1] * 120)]
    busy = make_job(connector=connector, batch_weight=1, max_items=1)
    for _ in range(100):  # 100 committed batches of another job over the same ids
        taken = lifecycle.batch_acquire(job=busy, worker="w")
        lifecycle.batch_succeed(batch_id=taken.pk, attempt=taken.attempt, result={})
    job = make_job(connector=connector, batch_weight=1, max_items=1)
    backfill_create(job=job, range_start=ids[110], range_end=ids[115], reason="r")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE inventory_batch")
    plan = plan_of(
        "SELECT min(lo) FROM tidemark_open_backfill_starts(%s, int8range(%s, %s))",
        [job.pk, ids[0], ids[112]],
        "ANALYZE, ",
    )
    nodes = list(plan_nodes(plan))
    # it finds the backfill's open batches over the range, and only them
    assert plan["Actual Rows"] == 1
    read = sum(
        n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)
        for n in nodes
        if "Relation Name" in n or n["Node Type"].startswith("Bitmap Index")
    )
    assert 1 <= read <= 3, nodes  # its batches from ids[110] to ids[112]: none of busy's 100
