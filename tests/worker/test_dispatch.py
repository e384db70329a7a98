"""One dispatch policy: Celery workers take work through acquire as API clients do, with the job's
max_concurrency as their limit and the backfill throttle decided there; nudges are all that
Celery carries, and beat's sweep nudges whatever still waits."""

import pytest

from inventory.models import Batch, BatchKind, BatchStatus
from inventory.services import dispatch, lifecycle, throttle
from inventory.services.backfills import backfill_create
from inventory.services.jobs import job_update
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def nudges(monkeypatch):
    """The job ids each step nudges (what it hands `dispatch`, sent on commit), no message sent."""
    sent = []
    monkeypatch.setattr(dispatch, "dispatch", lambda job_ids: sent.extend(job_ids))
    return sent


def test_a_workers_acquire_starts_no_more_incremental_batches_than_max_concurrency():
    connector = ConnectorFactory()
    make_assets(connector, [10] * 4)
    job = make_job(connector=connector, batch_weight=10, max_items=1, max_concurrency=2)

    first, second = (
        lifecycle.batch_acquire(job=job, worker="w", limit=job.max_concurrency) for _ in range(2)
    )
    assert first.kind == second.kind == BatchKind.INCREMENTAL
    assert lifecycle.batch_acquire(job=job, worker="w", limit=job.max_concurrency) is None
    # an API client sets no limit
    assert lifecycle.batch_acquire(job=job, worker="client") is not None

    lifecycle.batch_succeed(batch_id=first.pk, attempt=first.attempt)
    Batch.objects.filter(job=job, worker="client").update(status=BatchStatus.FAILED)
    fourth = lifecycle.batch_acquire(job=job, worker="w", limit=job.max_concurrency)
    assert fourth is not None and fourth.pk not in (first.pk, second.pk)


def test_a_full_incremental_lane_still_lets_a_backfill_batch_start():
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 3)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    running = lifecycle.batch_acquire(job=job, worker="w", limit=1)
    backfill = backfill_create(job=job, range_start=assets[2].pk, range_end=assets[2].pk)

    claimed = lifecycle.batch_acquire(job=job, worker="w", limit=1)
    assert claimed.backfill_id == backfill.pk
    assert lifecycle.batch_acquire(job=job, worker="w", limit=1) is None
    assert Batch.objects.get(pk=running.pk).status == BatchStatus.RUNNING


def test_acquire_starts_backfill_batches_only_within_the_shared_throttle():
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 4)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    for _ in assets:  # everything committed: only the backfill has work
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    backfill = backfill_create(
        job=job, range_start=assets[0].pk, range_end=assets[-1].pk, max_concurrency=4, priority=1
    )
    throttle.throttle_set(connector=None, weight_per_minute=25)
    assert len(dispatch.backfills_pace()[backfill.pk]) == 2

    taken = [lifecycle.batch_acquire(job=job, worker="w", limit=1) for _ in range(3)]
    assert [b is not None and b.backfill_id == backfill.pk for b in taken] == [True, True, False]
    assert dispatch.backfills_pace() == {}

    # a budget per connector applies too: 30 leaves room for one more after the 20 used
    throttle.throttle_set(connector=None, weight_per_minute=None)
    throttle.throttle_set(connector=connector, weight_per_minute=30)
    assert dispatch.backfills_pace() == {backfill.pk: [backfill.batches.order_by("span")[2].pk]}
    assert lifecycle.batch_acquire(job=job, worker="w").backfill_id == backfill.pk
    assert lifecycle.batch_acquire(job=job, worker="w") is None


def test_a_run_nudges_once_per_planned_batch(nudges):
    connector = ConnectorFactory()
    make_assets(connector, [10] * 3)
    job = make_job(connector=connector, batch_weight=10, max_items=1, max_concurrency=2)

    outcome = dispatch.job_run(job=job)

    assert len(outcome.planned) == 2
    assert nudges == [job.pk, job.pk]


def test_the_sweep_nudges_jobs_whose_due_batches_wait_and_have_room(nudges):
    connector = ConnectorFactory()
    make_assets(connector, [10] * 2)
    waiting = make_job(connector=connector, batch_weight=10, max_items=1, max_concurrency=2)
    full = make_job(connector=connector, batch_weight=10, max_items=1)
    paused = make_job(connector=connector, batch_weight=10, max_items=1)
    idle = make_job(connector=connector, batch_weight=10, max_items=1)
    for job in (waiting, full, paused):
        lifecycle.batches_plan(job=job, limit=1)  # queued, their nudges lost
    lifecycle.batch_acquire(job=full, worker="w")  # full: its one slot runs
    lifecycle.batches_plan(job=full, limit=1)
    job_update(job=paused, paused=True)
    lifecycle.batch_acquire(job=idle, worker="w")
    nudges.clear()

    dispatch.batches_dispatch_due()

    assert nudges == [waiting.pk]


def test_pacing_nudges_a_backfills_job_once_per_batch_it_may_start(nudges):
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 3)
    job = make_job(connector=connector, batch_weight=10, max_items=1)
    backfill = backfill_create(
        job=job, range_start=assets[0].pk, range_end=assets[-1].pk, max_concurrency=2, priority=1
    )

    sent = dispatch.backfills_pace()

    assert len(sent[backfill.pk]) == 2
    assert nudges == [job.pk, job.pk]


def test_job_run_and_acquire_let_an_urgent_backfill_hold_incremental_work_back_by_one_rule(nudges):
    """While the urgent backfill may start a batch, neither plans incremental work; once it runs
    at its max_concurrency, both do (tidemark_backfill_admissible decides for both)."""
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 4)
    job = make_job(connector=connector, batch_weight=10, max_items=1, max_concurrency=2)
    for _ in range(2):  # items 0 and 1 committed
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    urgent = backfill_create(
        job=job, range_start=assets[0].pk, range_end=assets[1].pk, priority=5, max_concurrency=1
    )
    held = dispatch.job_run(job=job)
    assert held.planned == [] and f"backfill {urgent.pk}" in held.reason

    started = lifecycle.batch_acquire(job=job, worker="w", limit=job.max_concurrency)
    assert started.backfill_id == urgent.pk  # the urgent backfill goes first
    # at its max_concurrency now: it may start nothing more, so incremental work goes on
    ran = dispatch.job_run(job=job)
    assert len(ran.planned) == 2  # items 2 and 3, up to the job's max_concurrency
    kinds = set(Batch.objects.filter(pk__in=ran.planned).values_list("kind", flat=True))
    assert kinds == {BatchKind.INCREMENTAL}
