"""One clock for leases: the database's. Leases are written with statement_timestamp(); the reaper
and the commit fence judge them with the database's now(), so an app server whose clock is off
neither reaps live batches nor lets an expired attempt commit."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from inventory.models import Batch, BatchStatus
from inventory.services import lifecycle
from inventory.services.errors import StaleAttempt
from tests.support.factories import make_assets, make_job

pytestmark = pytest.mark.django_db


def _running(lease_from_db_now: str) -> Batch:
    job = make_job(batch_weight=100, max_items=10)
    make_assets(job.connector, [10])
    batch = lifecycle.batch_acquire(job=job, worker="w:1")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE inventory_batch SET lease_expires_at = now() + %s::interval WHERE id = %s",
            [lease_from_db_now, batch.pk],
        )
    return batch


@pytest.fixture
def app_clock(monkeypatch):
    """Skew this process's clock (timezone.now) against the database's."""

    def skew(delta: timedelta):
        real = timezone.now()
        monkeypatch.setattr(timezone, "now", lambda: real + delta)

    return skew


def test_an_app_clock_running_ahead_reaps_no_live_lease(app_clock):
    batch = _running("30 seconds")
    app_clock(timedelta(hours=1))
    assert lifecycle.batches_reap_expired() == []
    batch.refresh_from_db()
    assert batch.status == BatchStatus.RUNNING


def test_an_app_clock_running_behind_still_reaps_an_expired_lease(app_clock):
    batch = _running("-1 second")
    app_clock(timedelta(hours=-1))
    assert lifecycle.batches_reap_expired() == [batch.pk]
    batch.refresh_from_db()
    assert batch.status in (BatchStatus.FAILED, BatchStatus.DEAD)
    assert batch.error["type"] == "LeaseExpired"


def test_an_expired_attempt_cannot_commit_whatever_the_app_clock_says(app_clock):
    batch = _running("-1 second")
    app_clock(timedelta(hours=-1))
    with pytest.raises(StaleAttempt):
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    batch.refresh_from_db()
    assert batch.status == BatchStatus.RUNNING
