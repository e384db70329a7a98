"""Several batches in one call: `batches_acquire` starts the batches single acquires would have
started, in the same order and by the same rules, and `batches_succeed` commits several, refusing
the attempts that may not commit while the others do (invariants 1, 2, 3, 8 with k > 1)."""

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from inventory.models import Batch, BatchStatus, Job, Watermark
from inventory.services import lifecycle
from inventory.services.assets import assets_register
from inventory.services.backfills import backfill_create
from inventory.services.errors import Conflict, InvalidInput
from tests.support.factories import ConnectorFactory, make_assets, make_job
from tests.support.processes import _run_in_processes

WEIGHTS = [30, 50, 20, 70, 10, 40, 60, 90, 5, 25, 35, 45]


def _spans(batches):
    return [(b.first_item, b.last_item, b.item_count, b.weight) for b in batches]


@pytest.mark.django_db
def test_k_batches_are_the_ones_k_single_acquires_start_in_the_same_order():
    connector = ConnectorFactory()
    make_assets(connector, WEIGHTS)
    one_call = make_job(connector=connector, name="one-call", batch_weight=100, max_items=3)
    one_by_one = make_job(connector=connector, name="one-by-one", batch_weight=100, max_items=3)

    taken = lifecycle.batches_acquire(job=one_call, worker="w", count=4)
    singles = [lifecycle.batch_acquire(job=one_by_one, worker="w") for _ in range(4)]

    assert len(taken) == 4
    assert _spans(taken) == _spans(singles)
    # contiguous, each within the budget and the cap, all running for this worker on attempt 1
    for before, after in zip(taken, taken[1:], strict=False):
        assert after.first_item == before.last_item + 1
    for batch in Batch.objects.filter(pk__in=[b.pk for b in taken]):
        assert batch.status == BatchStatus.RUNNING
        assert batch.worker == "w" and batch.attempt == 1
        assert batch.weight <= 100 or batch.item_count == 1
        assert batch.item_count <= 3


@pytest.mark.django_db
def test_fewer_batches_when_the_work_runs_out_and_none_when_there_is_none():
    connector = ConnectorFactory()
    make_assets(connector, [10, 10, 10])
    job = make_job(connector=connector, batch_weight=10, max_items=1)

    taken = lifecycle.batches_acquire(job=job, worker="w", count=10)
    assert len(taken) == 3
    assert lifecycle.batches_acquire(job=job, worker="w", count=10) == []


@pytest.mark.django_db
def test_the_incremental_lane_limit_holds_for_the_whole_call():
    connector = ConnectorFactory()
    make_assets(connector, WEIGHTS)
    job = make_job(connector=connector, batch_weight=10, max_items=1)

    taken = lifecycle.batches_acquire(job=job, worker="w", count=10, limit=2)
    assert len(taken) == 2
    assert lifecycle.batches_acquire(job=job, worker="w", count=10, limit=2) == []
    running = Batch.objects.filter(job=job, status=BatchStatus.RUNNING).count()
    assert running == 2


@pytest.mark.django_db
def test_an_urgent_backfill_goes_first_and_its_max_concurrency_holds_for_the_whole_call():
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 12)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    for batch in lifecycle.batches_acquire(job=job, worker="w", count=6):
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    backfill = backfill_create(
        job=job,
        range_start=assets[0].pk,
        range_end=assets[3].pk,
        max_concurrency=2,
        priority=1,
        reason="rewrite",
    )

    taken = lifecycle.batches_acquire(job=job, worker="w", count=5)

    assert [b.backfill_id for b in taken] == [backfill.pk, backfill.pk, None, None, None]
    assert [b.first_item for b in taken[2:]] == [a.pk for a in assets[6:9]]
    running = Batch.objects.filter(backfill=backfill, status=BatchStatus.RUNNING).count()
    assert running == 2


@pytest.mark.django_db
def test_a_paused_job_refuses_the_call_and_a_bad_count_is_refused_by_name():
    connector = ConnectorFactory()
    make_assets(connector, WEIGHTS)
    job = make_job(connector=connector)
    for count in (0, -1, 101, True, 2.5, "3"):
        with pytest.raises(InvalidInput) as refused:
            lifecycle.batches_acquire(job=job, worker="w", count=count)
        assert refused.value.field == "count"
    with pytest.raises(InvalidInput) as refused:
        lifecycle.batches_acquire(job=job, worker="", count=2)
    assert refused.value.field == "worker"
    Job.objects.filter(pk=job.pk).update(paused=True)
    job.refresh_from_db()
    with pytest.raises(Conflict):
        lifecycle.batches_acquire(job=job, worker="w", count=2)
    assert not Batch.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_several_commits_move_the_watermark_over_all_of_them():
    connector = ConnectorFactory()
    make_assets(connector, WEIGHTS)
    job = make_job(connector=connector, batch_weight=100, max_items=3)
    taken = lifecycle.batches_acquire(job=job, worker="w", count=3)

    outcome = lifecycle.batches_succeed(
        job=job,
        commits=[{"id": b.pk, "attempt": b.attempt, "result": {"rows": b.pk}} for b in taken],
    )

    assert [b.pk for b in outcome.committed] == [b.pk for b in taken]
    assert outcome.refused == {}
    assert {b.status for b in Batch.objects.filter(pk__in=[b.pk for b in taken])} == {
        BatchStatus.SUCCEEDED
    }
    assert Batch.objects.get(pk=taken[1].pk).result == {"rows": taken[1].pk}
    assert Watermark.objects.get(job=job).position == taken[-1].last_item + 1


@pytest.mark.django_db
def test_an_attempt_that_may_not_commit_is_refused_and_the_others_commit():
    connector = ConnectorFactory()
    make_assets(connector, WEIGHTS)
    job = make_job(connector=connector, batch_weight=100, max_items=3)
    first, second, third = lifecycle.batches_acquire(job=job, worker="w", count=3)
    # the second batch's lease ran out: its attempt may no longer commit (invariant 8)
    Batch.objects.filter(pk=second.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    outcome = lifecycle.batches_succeed(
        job=job, commits=[{"id": b.pk, "attempt": b.attempt} for b in (first, second, third)]
    )

    assert [b.pk for b in outcome.committed] == [first.pk, third.pk]
    assert list(outcome.refused) == [second.pk]
    assert "lease expired" in outcome.refused[second.pk]
    assert Batch.objects.get(pk=second.pk).status == BatchStatus.RUNNING
    # the watermark stops at the batch that did not commit: nothing after it counts as done
    assert Watermark.objects.get(job=job).position == second.first_item


@pytest.mark.django_db
def test_a_batch_named_twice_or_of_another_job_commits_nothing():
    connector = ConnectorFactory()
    make_assets(connector, WEIGHTS)
    job = make_job(connector=connector, name="mine", batch_weight=100, max_items=3)
    other = make_job(connector=connector, name="theirs", batch_weight=100, max_items=3)
    mine = lifecycle.batches_acquire(job=job, worker="w", count=2)
    theirs = lifecycle.batch_acquire(job=other, worker="w")

    for commits, field in (
        ([mine[0], theirs], "batches[1].id"),
        ([mine[0], mine[1], mine[0]], "batches[2].id"),
    ):
        with pytest.raises(InvalidInput) as refused:
            lifecycle.batches_succeed(
                job=job, commits=[{"id": b.pk, "attempt": b.attempt} for b in commits]
            )
        assert refused.value.field == field
    with pytest.raises(InvalidInput) as refused:
        lifecycle.batches_succeed(job=job, commits=[])
    assert refused.value.field == "batches"
    for bad, field in (({"id": mine[0].pk}, "attempt"), ({"id": "1", "attempt": 1}, "id")):
        with pytest.raises(InvalidInput) as refused:
            lifecycle.batches_succeed(job=job, commits=[bad])
        assert refused.value.field == f"batches[0].{field}"
    assert not Batch.objects.filter(status=BatchStatus.SUCCEEDED).exists()
    assert Watermark.objects.get(job=job).position == job.start_position


def _acquire_k_and_commit_until_done(job_id, worker, seed):
    """A worker loop taking 1-4 batches a call and committing them together, sometimes letting
    one fail instead (it is retried, by whichever worker comes next)."""
    rng = random.Random(seed)
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO off")  # ordering is checked, not durability
    job = Job.objects.get(pk=job_id)
    while True:
        taken = lifecycle.batches_acquire(job=job, worker=worker, count=rng.randint(1, 4))
        if not taken:
            unfinished = Batch.objects.filter(
                job_id=job_id,
                status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED],
            )
            if not unfinished.exists():
                return
            continue
        commits = []
        for batch in taken:
            if rng.random() < 0.05:
                lifecycle.batch_fail(batch_id=batch.pk, attempt=batch.attempt, error={"x": 1})
            else:
                commits.append({"id": batch.pk, "attempt": batch.attempt})
        if commits:
            outcome = lifecycle.batches_succeed(job=job, commits=commits)
            assert outcome.refused == {}, outcome.refused


@pytest.mark.django_db(transaction=True)
def test_processes_taking_several_batches_a_call_cover_every_item_exactly_once():
    connector = ConnectorFactory()
    rng = random.Random(11)
    assets_register(
        connector=connector,
        items=[(f"/data/k-{i:05d}.parquet", rng.randint(1, 10), {}) for i in range(1200)],
    )
    job = make_job(
        connector=connector, batch_weight=10, max_items=2, max_attempts=20, retry_backoff_seconds=0
    )

    _run_in_processes(
        _acquire_k_and_commit_until_done, [(job.pk, f"worker-{n}", n) for n in range(3)]
    )

    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT lower(span), upper(span), status,
                      lag(upper(span)) OVER (ORDER BY lower(span))
               FROM inventory_batch WHERE job_id = %s ORDER BY lower(span)""",
            [job.pk],
        )
        spans = cursor.fetchall()
        cursor.execute(
            """SELECT count(*) FROM inventory_asset AS a
               WHERE a.connector_id = %s AND (
                   SELECT count(*) FROM inventory_batch AS b
                   WHERE b.job_id = %s AND b.status = 'succeeded' AND b.span @> a.id) <> 1""",
            [connector.pk, job.pk],
        )
        not_once = cursor.fetchone()[0]
        cursor.execute(
            "SELECT max(id) FROM inventory_asset WHERE connector_id = %s", [connector.pk]
        )
        last_id = cursor.fetchone()[0]
    assert len(spans) >= 400, "the test must exercise hundreds of batches"
    assert {row[2] for row in spans} == {BatchStatus.SUCCEEDED}
    assert [row for row in spans if row[3] is not None and row[0] != row[3]] == []
    assert not_once == 0
    assert Watermark.objects.get(job=job).position == last_id + 1
