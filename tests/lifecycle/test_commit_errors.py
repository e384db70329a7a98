"""Database errors in a worker's commit path are retried or recorded, never raised out of
batch_execute, and never leave a batch running with its output written when a verdict is possible."""

import pytest
from django.db import DataError, OperationalError

from inventory.models import Batch, BatchAttempt, BatchStatus, Watermark, WatermarkEvent
from inventory.services import lifecycle
from tests.support.factories import make_assets, make_job
from workers import execution

pytestmark = pytest.mark.django_db(transaction=True)


def _planned_batch(**options):
    job = make_job(batch_weight=100, max_items=10, lease_seconds=30, **options)
    make_assets(job.connector, [10, 10, 10])
    (batch,) = lifecycle.batches_plan(job=job, limit=1)
    return batch


def _executor(name):
    return lambda spec, cancel: {"rows_out": len(spec["items"])}


def _failing_first(monkeypatch, target, attribute, errors):
    """Make `target.attribute` raise each of `errors` once (after calling through when an error is
    marked 'after'), then behave normally."""
    real = getattr(target, attribute)
    pending = list(errors)

    def flaky(**kwargs):
        if pending:
            when, error = pending.pop(0)
            if when == "after":
                real(**kwargs)
            raise error
        return real(**kwargs)

    monkeypatch.setattr(target, attribute, flaky)


def test_a_deadlocked_commit_is_retried_and_the_batch_succeeds(monkeypatch):
    batch = _planned_batch()
    _failing_first(
        monkeypatch,
        execution.lifecycle,
        "batch_succeed",
        [("before", OperationalError("deadlock detected"))] * 2,
    )

    outcome = execution.batch_execute(batch_id=batch.pk, executor_for=_executor, worker="w:1")

    assert outcome.status == BatchStatus.SUCCEEDED
    batch.refresh_from_db()
    assert batch.status == BatchStatus.SUCCEEDED
    assert Watermark.objects.get(job=batch.job).position == batch.span.upper


def test_a_commit_whose_connection_broke_after_it_went_through_counts_once(monkeypatch):
    batch = _planned_batch()
    _failing_first(
        monkeypatch,
        execution.lifecycle,
        "batch_succeed",
        [("after", OperationalError("server closed the connection unexpectedly"))],
    )

    outcome = execution.batch_execute(batch_id=batch.pk, executor_for=_executor, worker="w:1")

    assert outcome.status == BatchStatus.SUCCEEDED
    assert Batch.objects.get(pk=batch.pk).attempt == 1
    assert WatermarkEvent.objects.filter(watermark__job=batch.job).count() == 1


def test_a_commit_with_no_verdict_returns_and_leaves_the_batch_to_its_lease(monkeypatch):
    batch = _planned_batch()
    monkeypatch.setattr(execution, "COMMIT_RETRY_MAX_SECONDS", 0.5)
    _failing_first(
        monkeypatch,
        execution.lifecycle,
        "batch_succeed",
        [("before", OperationalError("could not connect to server"))] * 100,
    )

    outcome = execution.batch_execute(batch_id=batch.pk, executor_for=_executor, worker="w:1")

    assert outcome.status == "unconfirmed"
    batch.refresh_from_db()
    # still running under a lease that expires: the reaper hands it to the next attempt
    assert batch.status == BatchStatus.RUNNING and batch.lease_expires_at is not None
    assert not WatermarkEvent.objects.filter(watermark__job=batch.job).exists()


def test_a_commit_refused_for_good_is_recorded_as_a_failed_attempt(monkeypatch):
    batch = _planned_batch(retry_backoff_seconds=0)
    _failing_first(
        monkeypatch,
        execution.lifecycle,
        "batch_succeed",
        [("before", DataError("invalid input syntax for type timestamp"))],
    )

    outcome = execution.batch_execute(batch_id=batch.pk, executor_for=_executor, worker="w:1")

    assert outcome.status == BatchStatus.FAILED
    batch.refresh_from_db()
    assert batch.status == BatchStatus.FAILED
    attempt = BatchAttempt.objects.get(batch=batch, number=1)
    assert attempt.outcome == "failed" and attempt.error["type"] == "DataError"


def test_a_start_that_cannot_reach_the_database_is_deferred_not_raised(monkeypatch):
    batch = _planned_batch()
    monkeypatch.setattr(execution, "START_RETRY_SECONDS", 0.3)

    def down(**kwargs):
        raise OperationalError("the database system is shutting down")

    monkeypatch.setattr(execution, "_start_if_ours", down)

    outcome = execution.batch_execute(batch_id=batch.pk, executor_for=_executor, worker="w:1")

    assert outcome.status == "deferred" and outcome.retry_in > 0
    assert Batch.objects.get(pk=batch.pk).status == BatchStatus.QUEUED
