"""A commit reads only the batches its watermark moves over.

When one batch stays running (a slow stage, a hung call) while later batches of its job commit,
those batches wait behind it and the watermark cannot move. Each of their commits must still cost
the same: the advance walks from the watermark's position and stops at the running batch. The
cost is counted in rows of the batch table read within the transaction (PostgreSQL's own
per-transaction counters), not in time.
"""

import pytest
from django.db import connection, transaction

from inventory.models import Watermark
from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def planned_as_on_a_large_table():
    """A session of its own whose statements are planned as on a production-sized table: on a
    table of a few hundred rows PostgreSQL reads everything with a sequential scan, whatever a
    statement asks for (and a session caches its functions' plans, so it must be a new one)."""
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
    yield
    connection.close()


# batch rows read in this transaction: returned by a scan of the table, or fetched through one of
# its indexes (PostgreSQL counts those on the index)
BATCH_ROWS_READ = """
SELECT pg_stat_get_xact_tuples_returned('inventory_batch'::regclass)
       + (SELECT coalesce(sum(pg_stat_get_xact_tuples_fetched(indexrelid)), 0)
          FROM pg_index WHERE indrelid = 'inventory_batch'::regclass)
"""


def _batch_rows_read() -> int:
    with connection.cursor() as cursor:
        cursor.execute(BATCH_ROWS_READ)
        return int(cursor.fetchone()[0])


def _commit_cost_behind_a_running_batch(waiting: int):
    """A job whose first batch stays running while `waiting` later batches commit; then the
    batch rows one more commit reads. Returns (blocks, job, the running batch, the last batch)."""
    connector = ConnectorFactory()
    make_assets(connector, [1] * (waiting + 2))
    job = make_job(connector=connector, batch_weight=1, max_items=1)
    # a lease that outlives the test on a loaded machine: reaped, it would be retried and committed
    stuck = lifecycle.batch_acquire(job=job, worker="slow", lease_seconds=3600)
    for _ in range(waiting):
        batch = lifecycle.batch_acquire(job=job, worker="fast")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    last = lifecycle.batch_acquire(job=job, worker="fast")
    with transaction.atomic():  # the counters are this transaction's
        before = _batch_rows_read()
        lifecycle.batch_succeed(batch_id=last.pk, attempt=last.attempt)
        read = _batch_rows_read() - before
    return read, job, stuck, last


def test_a_commit_behind_a_running_batch_does_not_read_the_batches_waiting_with_it(
    planned_as_on_a_large_table,
):
    few, *_ = _commit_cost_behind_a_running_batch(10)
    many, job, stuck, last = _commit_cost_behind_a_running_batch(400)
    # reading the 400 waiting batches would add one row each
    assert many < few + 100, (few, many)

    # and the watermark still moves over all of them at once when the running batch commits
    stuck.refresh_from_db()
    assert stuck.status == "running" and stuck.attempt == 1
    watermark = Watermark.objects.get(job=job)
    assert watermark.position == stuck.span.lower
    lifecycle.batch_succeed(batch_id=stuck.pk, attempt=stuck.attempt)
    watermark.refresh_from_db()
    assert watermark.position == last.span.upper
    assert watermark.events.count() == 1
