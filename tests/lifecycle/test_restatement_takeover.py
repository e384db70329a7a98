"""A restatement whose restating item a worker already took (issue 43, the split case).

The restatement's backfill runs as one batch from the first restated output through the item
that restates them (docs/guarantees.md, "Restatements go first"). When an incremental batch
already holds that item, the restatement takes it over if it has not written its output yet:
the batch is cancelled and its items ride in the backfill's one batch, so the rebuilt outputs and
the rows that replace them reach the sink in one publish. A batch whose output is already in the
sink cannot be taken over: the backfill then rebuilds the restated outputs alone.

Batches go through the real lifecycle and, for a published output, the real publish fence.
"""

import os

import pytest

from inventory.models import Backfill, Batch, BatchStatus, RestatementCause
from inventory.services import lifecycle, outputs, restatements
from tests.support.factories import make_assets, make_job
from workers.spark.fence import database_publish

pytestmark = pytest.mark.django_db(transaction=True)


def _committed_three_and_a_fourth_taken():
    """Items 1-3 committed one batch each; a worker holds the batch of item 4 (the one that
    restates items 1 and 2)."""
    job = make_job(batch_weight=10, max_items=1)
    assets = make_assets(job.connector, [10] * 6)
    for _ in range(3):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    taken = lifecycle.batch_acquire(job=job, worker="racer")
    assert (taken.span.lower, taken.span.upper) == (assets[3].pk, assets[3].pk + 1)
    return job, assets, taken


def _restate(job, assets):
    created, done = restatements.restate_items(
        job.connector,
        [assets[0].pk, assets[1].pk],
        reason="item 4 replaced the rows of items 1 and 2",
        cause=RestatementCause.CHANGED_FILES,
        priority=1,
        through=assets[3].pk,
    )
    assert done
    (backfill,) = created
    return Backfill.objects.get(pk=backfill.pk)


def test_a_taken_batch_that_has_not_published_rides_in_the_restatement(tmp_path):
    job, assets, taken = _committed_three_and_a_fourth_taken()

    backfill = _restate(job, assets)

    taken.refresh_from_db()
    assert taken.status == BatchStatus.CANCELLED
    assert "taken over by the restatement" in taken.error["reason"]
    (rebuild,) = backfill.batches.all()
    # the first restated output through the restating item, in one batch
    assert (rebuild.span.lower, rebuild.span.upper) == (assets[0].pk, assets[3].pk + 1)

    # the worker's attempt of the taken batch is fenced out; the rebuild runs and commits past
    # the watermark, which moves over item 4 with nothing left uncovered
    with pytest.raises(Exception, match="cancelled|stale|fenced"):
        with database_publish(dsn=_fence_dsn(), batch_id=taken.pk, attempt=taken.attempt)():
            pass
    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert batch.pk == rebuild.pk
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    job.watermark.refresh_from_db()
    assert job.watermark.position == assets[3].pk + 1
    rest = lifecycle.batch_acquire(job=job, worker="w")
    assert (rest.span.lower, rest.span.upper) == (assets[4].pk, assets[4].pk + 1)


def test_a_taken_batch_whose_output_is_in_the_sink_is_left_to_commit(tmp_path):
    job, assets, taken = _committed_three_and_a_fourth_taken()
    with database_publish(dsn=_fence_dsn(), batch_id=taken.pk, attempt=taken.attempt)():
        pass  # its output is in the sink now

    backfill = _restate(job, assets)

    taken.refresh_from_db()
    assert taken.status == BatchStatus.RUNNING
    spans = [(b.span.lower, b.span.upper) for b in backfill.batches.order_by("span")]
    # the restated outputs alone, one batch each as they were written; item 4 is not in it
    assert spans == [(assets[0].pk, assets[0].pk + 1), (assets[1].pk, assets[1].pk + 1)]
    lifecycle.batch_succeed(batch_id=taken.pk, attempt=taken.attempt)
    assert Batch.objects.get(pk=taken.pk).status == BatchStatus.SUCCEEDED


def _fence_dsn() -> str:
    outputs.fence_spec()
    return os.environ[outputs.FENCE_DSN_ENV]
