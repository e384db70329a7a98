"""Where the next incremental batch starts, found by index searches, equals the old full read.

`tidemark_incremental_start` once read every batch past the watermark (a window over all of them)
to find the first hole or the end of the last holding batch. It now searches: the batch after the
watermark, the few ranges of batches that left the holding statuses, and the last holding batch.
The reference below is the old statement; random histories of acquires, commits, failures and
cancellations (holes, re-planned holes, batches waiting behind a running one) must give the same
answer after every step.
"""

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Batch, BatchStatus
from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job

# the statement tidemark_incremental_start ran before migration 0033, as the reference
REFERENCE = """
WITH wm AS (SELECT position FROM inventory_watermark WHERE job_id = %(job)s),
held AS (
    SELECT lower(span) AS b_lo, upper(span) AS b_hi FROM inventory_batch, wm
    WHERE job_id = %(job)s AND backfill_id IS NULL
      AND status = ANY(tidemark_holding_statuses()) AND upper(span) > wm.position
), ordered AS (
    SELECT b_lo, b_hi, lag(b_hi, 1, (SELECT position FROM wm)) OVER (ORDER BY b_lo) AS prev_hi
    FROM held
), hole AS (
    SELECT prev_hi AS h_lo, b_lo AS h_hi FROM ordered WHERE b_lo > prev_hi ORDER BY b_lo LIMIT 1
)
SELECT coalesce((SELECT h_lo FROM hole), (SELECT max(b_hi) FROM held), (SELECT position FROM wm)),
       (SELECT h_hi FROM hole)
"""

STEPS = st.lists(
    st.tuples(st.sampled_from(["acquire", "succeed", "fail", "cancel"]), st.integers(0, 50)),
    min_size=1,
    max_size=25,
)


@pytest.fixture
def job(db):
    connector = ConnectorFactory()
    make_assets(connector, [1] * 40)
    return make_job(connector=connector, batch_weight=3, max_items=3)


def _both(job_id: int) -> tuple[tuple, tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT lo, hi FROM tidemark_incremental_start(%s)", [job_id])
        searched = cursor.fetchone()
        cursor.execute(REFERENCE, {"job": job_id})
        return searched, cursor.fetchone()


def _pick(job, statuses, index):
    found = list(Batch.objects.filter(job=job, status__in=statuses).order_by("id"))
    return found[index % len(found)] if found else None


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=STEPS)
def test_the_searched_start_equals_the_full_read_after_any_history(job, steps):
    with transaction.atomic():
        savepoint = transaction.savepoint()
        for action, index in steps:
            if action == "acquire":
                lifecycle.batch_acquire(job=job, worker="w")
            elif action == "succeed" and (batch := _pick(job, [BatchStatus.RUNNING], index)):
                lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
            elif action == "fail" and (batch := _pick(job, [BatchStatus.RUNNING], index)):
                lifecycle.batch_fail(batch_id=batch.pk, attempt=batch.attempt, error={"m": "x"})
            elif action == "cancel" and (
                batch := _pick(
                    job, [BatchStatus.RUNNING, BatchStatus.QUEUED, BatchStatus.FAILED], index
                )
            ):
                lifecycle.batch_cancel(batch_id=batch.pk, actor="test")
            searched, reference = _both(job.pk)
            assert searched == reference, (action, searched, reference)
        transaction.savepoint_rollback(savepoint)


@pytest.mark.django_db
def test_a_hole_behind_a_running_batch_and_its_refill():
    """By hand: a cancelled range between a running and a committed batch is the hole; once
    refilled, the next batch starts after the last one."""
    connector = ConnectorFactory()
    make_assets(connector, [1] * 12)
    job = make_job(connector=connector, batch_weight=4, max_items=4)
    first = lifecycle.batch_acquire(job=job, worker="w")  # stays running
    middle = lifecycle.batch_acquire(job=job, worker="w")
    last = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=last.pk, attempt=last.attempt)
    lifecycle.batch_cancel(batch_id=middle.pk, actor="test")
    searched, reference = _both(job.pk)
    assert searched == reference == (middle.span.lower, last.span.lower)

    refill = lifecycle.batch_acquire(job=job, worker="w")
    assert (refill.span.lower, refill.span.upper) == (middle.span.lower, middle.span.upper)
    searched, reference = _both(job.pk)
    assert searched == reference == (last.span.upper, None)
    assert first.status == BatchStatus.RUNNING


@pytest.mark.django_db
def test_after_many_cancellations_the_start_is_the_full_reads():
    """More than 32 batches past the watermark out of the holding statuses (as after a replay or a
    reset): the function reads the batches past the watermark once, as the reference does, and
    the answer is the same while the holes are planned again."""
    connector = ConnectorFactory()
    make_assets(connector, [1] * 50)
    job = make_job(connector=connector, batch_weight=1, max_items=1)
    first = lifecycle.batch_acquire(job=job, worker="w")  # stays running: the watermark stays
    taken = [lifecycle.batch_acquire(job=job, worker="w") for _ in range(40)]
    for batch in taken[:36]:
        lifecycle.batch_cancel(batch_id=batch.pk, actor="test")
    searched, reference = _both(job.pk)
    assert searched == reference == (first.span.upper, taken[36].span.lower)
    for _ in range(5):
        lifecycle.batch_acquire(job=job, worker="w")
        searched, reference = _both(job.pk)
        assert searched == reference
