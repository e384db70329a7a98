"""Invariant 2 (no overlap, no gap) under many acquirers, and the database constraint behind it.

The concurrency test forks real OS processes, each with its own PostgreSQL connection, all taking
and committing batches of one job at once; the result is then checked in SQL, not through the
services that produced it.
"""

import bisect
import random
import time

import pytest
from django.db import IntegrityError, connection, transaction

from inventory.models import Batch, BatchAttempt, BatchKind, BatchStatus, Watermark
from inventory.services import lifecycle
from inventory.services.assets import assets_register
from inventory.services.backfills import backfill_create
from tests.support.factories import ConnectorFactory, make_assets, make_job
from tests.support.processes import _run_in_processes

WORKERS = 4
ITEMS = 3000


def _acquire_and_commit_until_done(job_id, worker, seed):
    """A worker loop: take a batch, sometimes fail it (it is retried), otherwise commit it."""
    from inventory.models import Job

    rng = random.Random(seed)
    with connection.cursor() as cursor:
        # what is checked here is ordering and locking, not durability; skipping the WAL flush
        # per commit keeps thousands of commits fast on a shared disk
        cursor.execute("SET synchronous_commit TO off")
    job = Job.objects.get(pk=job_id)
    while True:
        batch = lifecycle.batch_acquire(job=job, worker=worker)
        if batch is None:
            # nothing to plan; stop only when no other worker's batch can come back as a retry
            unfinished = Batch.objects.filter(
                job_id=job_id,
                status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED],
            )
            if not unfinished.exists():
                return
            time.sleep(0.005)
            continue
        if rng.random() < 0.03:
            lifecycle.batch_fail(
                batch_id=batch.id, attempt=batch.attempt, error={"type": "Injected"}
            )
        else:
            lifecycle.batch_succeed(
                batch_id=batch.id, attempt=batch.attempt, result={"worker": worker}
            )


def _fetch(sql, params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_four_processes_commit_thousands_of_batches_without_overlap_or_gap():
    connector = ConnectorFactory()
    rng = random.Random(7)
    weights = [rng.randint(0, 10) for _ in range(ITEMS)]
    assets_register(
        connector=connector,
        items=[(f"/data/part-{i:05d}.parquet", w, {}) for i, w in enumerate(weights)],
    )
    # budget 10 with weights 0..10 and a cap of 2: one or two items per batch
    job = make_job(
        connector=connector,
        batch_weight=10,
        max_items=2,
        max_attempts=20,
        retry_backoff_seconds=0,
    )

    _run_in_processes(
        _acquire_and_commit_until_done,
        [(job.pk, f"worker-{n}", n) for n in range(WORKERS)],
    )

    first_id, last_id, total_weight = _fetch(
        "SELECT min(id), max(id), sum(weight) FROM inventory_asset WHERE connector_id = %s",
        [connector.pk],
    )[0]
    batch_count = Batch.objects.filter(job=job).count()
    assert batch_count >= 1800, "the test must exercise thousands of acquisitions"
    assert not Batch.objects.filter(job=job).exclude(status=BatchStatus.SUCCEEDED).exists()
    # some attempts were failed on purpose and their batches retried by whichever worker came next
    assert BatchAttempt.objects.filter(batch__job=job, outcome="failed").exists()

    # Ordered by lower bound, each span must start exactly where the previous one ended: a start
    # before it is an overlap, a start after it a gap (spans are never empty, a DB check).
    spans = _fetch(
        """
        SELECT lower(span), upper(span), item_count, weight, status,
               lag(upper(span)) OVER (ORDER BY lower(span)) AS prev_upper
        FROM inventory_batch WHERE job_id = %s ORDER BY lower(span)
        """,
        [job.pk],
    )
    overlaps = [row for row in spans if row[5] is not None and row[0] < row[5]]
    gaps = [row for row in spans if row[5] is not None and row[0] > row[5]]
    assert overlaps == []
    assert gaps == []
    assert (spans[0][0], spans[-1][1]) == (job.start_position, last_id + 1)

    # every item lies in exactly one succeeded batch: expand each batch into the ids it covers
    # (from the first asset on; the first batch starts at 0) and join on equality
    not_exactly_once = _fetch(
        """
        SELECT a.id, count(covered.id) FROM inventory_asset a
        LEFT JOIN (
            SELECT generate_series(greatest(lower(span), %s), upper(span) - 1) AS id
            FROM inventory_batch WHERE job_id = %s AND status = 'succeeded'
        ) covered ON covered.id = a.id
        WHERE a.connector_id = %s GROUP BY a.id HAVING count(covered.id) <> 1
        """,
        [first_id, job.pk, connector.pk],
    )
    assert not_exactly_once == []

    # and each batch's item count and weight match its items
    items = _fetch(
        "SELECT id, weight FROM inventory_asset WHERE connector_id = %s ORDER BY id",
        [connector.pk],
    )
    lowers = [row[0] for row in spans]
    contents = {index: [] for index in range(len(spans))}
    for item_id, weight in items:
        index = bisect.bisect_right(lowers, item_id) - 1
        assert index >= 0 and spans[index][0] <= item_id < spans[index][1]
        assert spans[index][4] == BatchStatus.SUCCEEDED
        contents[index].append(weight)
    for index, (_lower, _upper, item_count, weight, _status, _prev) in enumerate(spans):
        assert (item_count, weight) == (len(contents[index]), sum(contents[index]))
        assert 1 <= item_count <= 2
        assert weight <= 10 or item_count == 1
    assert sum(row[2] for row in spans) == ITEMS
    assert sum(row[3] for row in spans) == total_weight

    watermark = Watermark.objects.get(job=job)
    assert (watermark.position, watermark.value) == (last_id + 1, last_id)

    # the workers really ran at the same time: every worker committed batches, and attempts of
    # different workers overlapped in time
    per_worker = dict(
        _fetch(
            "SELECT worker, count(*) FROM inventory_batch WHERE job_id = %s GROUP BY worker",
            [job.pk],
        )
    )
    assert sorted(per_worker) == [f"worker-{n}" for n in range(WORKERS)]
    # one worker's attempts follow each other, so an attempt that starts before the latest
    # earlier-started attempt has finished ran at the same time as another worker's
    overlapping_attempts = _fetch(
        """
        SELECT count(*) FROM (
            SELECT x.started_at, max(x.finished_at) OVER (
                ORDER BY x.started_at ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ) AS busy_until
            FROM inventory_batchattempt x JOIN inventory_batch b ON b.id = x.batch_id
            WHERE b.job_id = %s
        ) ordered WHERE started_at < busy_until
        """,
        [job.pk],
    )[0][0]
    assert overlapping_attempts > 0


def _batch(job, status, lower, upper, **fields):
    return Batch.objects.create(
        job=job,
        kind=fields.pop("kind", BatchKind.INCREMENTAL),
        status=status,
        span=(lower, upper),
        item_count=upper - lower,
        weight=0,
        max_attempts=3,
        **fields,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "status",
    [
        BatchStatus.QUEUED,
        BatchStatus.SUCCEEDED,
        BatchStatus.FAILED,
        BatchStatus.DEAD,
    ],
)
def test_the_database_refuses_an_overlapping_batch_of_the_same_job(status):
    job = make_job()
    _batch(job, status, 10, 20)

    with pytest.raises(IntegrityError, match="batch_no_overlap_per_job_lane"):
        with transaction.atomic():
            _batch(job, BatchStatus.QUEUED, 19, 25)

    # touching ranges are fine: [10, 20) and [20, 25) share no item
    _batch(job, BatchStatus.QUEUED, 20, 25)


@pytest.mark.django_db
def test_the_database_refuses_a_running_batch_overlapping_a_skipped_one():
    job = make_job()
    _batch(job, BatchStatus.SKIPPED, 1, 5, skip_reason="bad files")
    with pytest.raises(IntegrityError), transaction.atomic():
        _batch(
            job,
            BatchStatus.RUNNING,
            4,
            6,
            lease_expires_at="2030-01-01T00:00:00Z",
        )


@pytest.mark.django_db
def test_a_cancelled_batch_does_not_hold_its_range():
    job = make_job()
    _batch(job, BatchStatus.CANCELLED, 10, 20)
    _batch(job, BatchStatus.QUEUED, 10, 20)  # no IntegrityError
    assert Batch.objects.filter(job=job, span=(10, 20)).count() == 2


@pytest.mark.django_db
def test_other_jobs_and_backfill_lanes_may_cover_the_same_ids():
    connector = ConnectorFactory()
    assets = make_assets(connector, [5, 5, 5])
    job = make_job(connector=connector, batch_weight=100)
    other = make_job(connector=connector, batch_weight=100)
    lower, upper = assets[0].id, assets[-1].id + 1
    _batch(job, BatchStatus.SUCCEEDED, lower, upper)
    _batch(other, BatchStatus.SUCCEEDED, lower, upper)
    backfill = backfill_create(job=job, range_start=lower, range_end=upper - 1)
    assert backfill.batches.get().span.lower == lower


@pytest.mark.django_db
def test_acquire_replans_the_range_of_a_cancelled_batch_first():
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 6)
    job = make_job(connector=connector, batch_weight=20, max_items=10)

    first = lifecycle.batch_acquire(job=job, worker="w")
    second = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_cancel(batch_id=first.id, actor="ops", reason="wrong config")

    again = lifecycle.batch_acquire(job=job, worker="w")
    assert (again.span.lower, again.span.upper) == (first.span.lower, first.span.upper)
    assert again.id != first.id
    lifecycle.batch_succeed(batch_id=again.id, attempt=again.attempt)
    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)
    assert Watermark.objects.get(job=job).value == assets[3].id
