"""The batch lifecycle: out-of-order commits, dead batches, operator retry and skip, fencing, reaping.

Invariants 1, 3 and 8 of docs/design.md: the watermark is the contiguous committed prefix, a failed or
dead batch never moves it, and only the current attempt with a live lease may commit.
"""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import Batch, BatchAttempt, BatchStatus, Watermark, WatermarkEvent
from inventory.services import lifecycle
from inventory.services.errors import Conflict, InvalidInput, StaleAttempt
from tests.support.factories import ConnectorFactory, make_assets, make_job


def _job_with_items(count, **options):
    """A job whose budget makes every item a batch of its own."""
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * count)
    job = make_job(connector=connector, batch_weight=10, max_items=1, **options)
    return job, assets


def _watermark(job):
    watermark = Watermark.objects.get(job=job)
    return watermark.position, watermark.value


def _expire_lease(batch):
    Batch.objects.filter(pk=batch.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db
def test_out_of_order_commits_move_the_watermark_only_over_the_contiguous_prefix():
    job, assets = _job_with_items(3)
    first, second, third = (lifecycle.batch_acquire(job=job, worker=f"w{n}") for n in range(3))
    assert [b.item_count for b in (first, second, third)] == [1, 1, 1]

    lifecycle.batch_succeed(batch_id=third.id, attempt=third.attempt)
    assert _watermark(job) == (job.start_position, None)
    assert not WatermarkEvent.objects.filter(watermark__job=job).exists()

    lifecycle.batch_succeed(batch_id=first.id, attempt=first.attempt)
    assert _watermark(job) == (assets[0].id + 1, assets[0].id)

    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)
    assert _watermark(job) == (assets[2].id + 1, assets[2].id)

    events = list(
        WatermarkEvent.objects.filter(watermark__job=job)
        .order_by("id")
        .values_list("source", "batch_id", "old_value", "new_value", "old_position", "new_position")
    )
    assert events == [
        ("batch", first.id, None, assets[0].id, job.start_position, assets[0].id + 1),
        ("batch", second.id, assets[0].id, assets[2].id, assets[0].id + 1, assets[2].id + 1),
    ]


@pytest.mark.django_db
def test_a_failed_batch_never_moves_the_watermark_and_is_retried_after_its_backoff():
    job, assets = _job_with_items(2, retry_backoff_seconds=60)
    first = lifecycle.batch_acquire(job=job, worker="w")
    failed = lifecycle.batch_fail(
        batch_id=first.id, attempt=first.attempt, error={"type": "ValueError", "message": "boom"}
    )
    assert failed.status == BatchStatus.FAILED
    assert failed.next_attempt_at > timezone.now() + timedelta(seconds=55)
    assert Batch.objects.get(pk=first.id).error == {"type": "ValueError", "message": "boom"}

    # still backing off: the next acquire plans new work instead
    second = lifecycle.batch_acquire(job=job, worker="w")
    assert second.id != first.id
    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)
    assert _watermark(job) == (job.start_position, None)

    Batch.objects.filter(pk=first.id).update(next_attempt_at=timezone.now())
    retried = lifecycle.batch_acquire(job=job, worker="w2")
    assert (retried.id, retried.attempt, retried.worker) == (first.id, 2, "w2")
    lifecycle.batch_succeed(batch_id=retried.id, attempt=retried.attempt)
    assert _watermark(job) == (assets[1].id + 1, assets[1].id)
    outcomes = list(
        BatchAttempt.objects.filter(batch_id=first.id).values_list("number", "outcome", "worker")
    )
    assert outcomes == [(1, "failed", "w"), (2, "succeeded", "w2")]


def _kill(job, batch):
    """Fail a running batch and each of its retries until it has no attempts left."""
    while True:
        batch = lifecycle.batch_fail(
            batch_id=batch.id, attempt=batch.attempt, error={"type": "Boom", "n": batch.attempt}
        )
        if batch.status == BatchStatus.DEAD:
            return batch
        Batch.objects.filter(pk=batch.pk).update(next_attempt_at=timezone.now())
        retried = lifecycle.batch_acquire(job=job, worker="w")
        assert retried.id == batch.id
        batch = retried


@pytest.mark.django_db
def test_a_dead_batch_holds_the_watermark_until_it_is_skipped_with_a_reason():
    job, assets = _job_with_items(3, max_attempts=2)
    first, second, third = (lifecycle.batch_acquire(job=job, worker="w") for _ in range(3))
    dead = _kill(job, first)
    assert (dead.status, dead.attempt) == (BatchStatus.DEAD, 2)
    assert dead.error == {"type": "Boom", "n": 2}

    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)
    lifecycle.batch_succeed(batch_id=third.id, attempt=third.attempt)
    assert _watermark(job) == (job.start_position, None)
    # no acquire brings a dead batch back by itself
    assert lifecycle.batch_acquire(job=job, worker="w") is None

    with pytest.raises(InvalidInput) as refused:
        lifecycle.batch_skip(batch_id=dead.id, actor="alice", reason="   ")
    assert refused.value.field == "reason"
    assert Batch.objects.get(pk=dead.id).status == BatchStatus.DEAD
    assert _watermark(job) == (job.start_position, None)

    skipped = lifecycle.batch_skip(batch_id=dead.id, actor="alice", reason="corrupt file")
    assert skipped.status == BatchStatus.SKIPPED
    assert "corrupt file" in skipped.skip_reason
    assert _watermark(job) == (assets[2].id + 1, assets[2].id)
    event = WatermarkEvent.objects.filter(watermark__job=job).get()
    assert (event.batch_id, event.old_position, event.new_position) == (
        dead.id,
        job.start_position,
        assets[2].id + 1,
    )


@pytest.mark.django_db
def test_only_dead_batches_can_be_skipped():
    job, _ = _job_with_items(1)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    with pytest.raises(Conflict):
        lifecycle.batch_skip(batch_id=batch.id, actor="alice", reason="not dead yet")
    assert Batch.objects.get(pk=batch.id).status == BatchStatus.RUNNING


@pytest.mark.django_db
def test_an_operator_retry_gives_a_dead_batch_more_attempts():
    job, assets = _job_with_items(2, max_attempts=2)
    first = lifecycle.batch_acquire(job=job, worker="w")
    second = lifecycle.batch_acquire(job=job, worker="w")
    dead = _kill(job, first)
    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)

    retried = lifecycle.batch_retry(batch_id=dead.id, actor="alice")
    assert retried.status == BatchStatus.QUEUED
    assert retried.max_attempts > retried.attempt

    again = lifecycle.batch_acquire(job=job, worker="w")
    assert (again.id, again.attempt) == (dead.id, 3)
    lifecycle.batch_succeed(batch_id=again.id, attempt=again.attempt)
    assert _watermark(job) == (assets[1].id + 1, assets[1].id)

    with pytest.raises(Conflict):  # a succeeded batch is not retried
        lifecycle.batch_retry(batch_id=again.id, actor="alice")


@pytest.mark.django_db
def test_a_stale_attempt_cannot_succeed_after_the_batch_was_reaped_and_restarted():
    job, assets = _job_with_items(1, retry_backoff_seconds=60)
    batch = lifecycle.batch_acquire(job=job, worker="slow")
    _expire_lease(batch)

    assert lifecycle.batches_reap_expired() == [batch.id]
    reaped = Batch.objects.get(pk=batch.id)
    assert reaped.status == BatchStatus.FAILED
    assert reaped.error["type"] == "LeaseExpired"
    assert "slow" in reaped.error["message"]
    assert BatchAttempt.objects.get(batch=batch, number=1).outcome == "failed"

    # the backoff has not passed: nothing is requeued yet
    assert lifecycle.batches_requeue_due(job_id=job.pk) == []
    Batch.objects.filter(pk=batch.id).update(next_attempt_at=timezone.now())
    assert lifecycle.batches_requeue_due(job_id=job.pk) == [batch.id]
    restarted = lifecycle.batch_acquire(job=job, worker="fast")
    assert (restarted.id, restarted.attempt) == (batch.id, 2)

    with pytest.raises(StaleAttempt):
        lifecycle.batch_succeed(batch_id=batch.id, attempt=1, result={"rows": 1})
    with pytest.raises(StaleAttempt):
        lifecycle.batch_fail(batch_id=batch.id, attempt=1, error={"type": "late"})
    with pytest.raises(StaleAttempt):
        lifecycle.batch_heartbeat(batch_id=batch.id, attempt=1)
    unchanged = Batch.objects.get(pk=batch.id)
    assert (unchanged.status, unchanged.attempt, unchanged.worker, unchanged.result) == (
        BatchStatus.RUNNING,
        2,
        "fast",
        {},
    )
    assert _watermark(job) == (job.start_position, None)

    lifecycle.batch_succeed(batch_id=batch.id, attempt=2, result={"rows": 1})
    assert _watermark(job) == (assets[0].id + 1, assets[0].id)


@pytest.mark.django_db
def test_an_expired_lease_cannot_succeed_even_before_the_reaper_ran():
    job, _ = _job_with_items(1)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    _expire_lease(batch)

    with pytest.raises(StaleAttempt, match="lease expired"):
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    assert Batch.objects.get(pk=batch.id).status == BatchStatus.RUNNING
    assert _watermark(job) == (job.start_position, None)


@pytest.mark.django_db
def test_a_heartbeat_extends_the_lease_until_it_expires():
    job, _ = _job_with_items(1)
    batch = lifecycle.batch_acquire(job=job, worker="w", lease_seconds=5)
    before = Batch.objects.get(pk=batch.id).lease_expires_at

    expires = lifecycle.batch_heartbeat(batch_id=batch.id, attempt=batch.attempt, lease_seconds=300)
    stored = Batch.objects.get(pk=batch.id).lease_expires_at
    assert stored == expires
    assert stored > before + timedelta(seconds=250)

    # a refused heartbeat says why, in the words a report from that attempt would get
    with pytest.raises(StaleAttempt, match=f"on attempt {batch.attempt}; attempt 2 may not"):
        lifecycle.batch_heartbeat(batch_id=batch.id, attempt=batch.attempt + 1)

    _expire_lease(batch)
    expired_at = Batch.objects.get(pk=batch.id).lease_expires_at
    with pytest.raises(StaleAttempt, match=re.escape(f"lease expired at {expired_at.isoformat()}")):
        lifecycle.batch_heartbeat(batch_id=batch.id, attempt=batch.attempt, lease_seconds=300)
    assert Batch.objects.get(pk=batch.id).lease_expires_at == expired_at


@pytest.mark.django_db
def test_the_reaper_leaves_live_leases_alone_and_kills_a_batch_out_of_attempts():
    job, _ = _job_with_items(2, max_attempts=1)
    live = lifecycle.batch_acquire(job=job, worker="alive")
    lost = lifecycle.batch_acquire(job=job, worker="gone")
    _expire_lease(lost)

    assert lifecycle.batches_reap_expired() == [lost.id]
    assert Batch.objects.get(pk=live.id).status == BatchStatus.RUNNING
    dead = Batch.objects.get(pk=lost.id)
    assert (dead.status, dead.error["type"]) == (BatchStatus.DEAD, "LeaseExpired")
    assert lifecycle.batches_reap_expired() == []


@pytest.mark.django_db
def test_a_cancelled_running_batch_cannot_be_committed_by_its_worker():
    job, _ = _job_with_items(1)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_cancel(batch_id=batch.id, actor="alice", reason="wrong sink")

    with pytest.raises(StaleAttempt):
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    assert Batch.objects.get(pk=batch.id).status == BatchStatus.CANCELLED
    assert _watermark(job) == (job.start_position, None)


@pytest.mark.django_db
def test_a_refused_commit_leaves_the_callers_transaction_usable():
    from django.db import connection

    from inventory.services.errors import NotFound

    with pytest.raises(NotFound):
        lifecycle.batch_succeed(batch_id=0, attempt=1)
    with connection.cursor() as cursor:  # would raise InFailedSqlTransaction without a savepoint
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db
def test_the_batch_reader_gives_what_the_raw_queryset_gives_field_for_field():
    """The gateway's batch reader (plan, acquire, succeed, transitions, inserts) builds a Batch
    from a row without Django's raw queryset: every field, with its converters (range, JSON,
    times), must match."""
    from inventory.sql.gateway import _first_batch as batch_fetch

    job = make_job(max_items=2)
    make_assets(job.connector, [1, 2, 3])
    acquired = lifecycle.batch_acquire(job=job, worker="w1")
    lifecycle.batch_succeed(batch_id=acquired.id, attempt=acquired.attempt, result={"rows_out": 2})
    sql, params = "SELECT * FROM inventory_batch WHERE id = %(id)s", {"id": acquired.id}

    fetched = batch_fetch(sql, params)
    (raw,) = Batch.objects.raw(sql, params)

    fields = [f.attname for f in Batch._meta.concrete_fields]
    assert [getattr(fetched, f) for f in fields] == [getattr(raw, f) for f in fields]
    assert fetched.result == {"rows_out": 2} and fetched.span.lower == acquired.span.lower
    assert fetched._state.adding is False and fetched._state.db == raw._state.db
    assert batch_fetch(sql, {"id": -1}) is None
    with pytest.raises(ValueError, match="not a batch row"):
        batch_fetch("SELECT id, status FROM inventory_batch WHERE id = %(id)s", params)
