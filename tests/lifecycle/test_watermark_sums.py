"""A watermark's own prefix sums (Watermark.done_count, done_weight: the count and weight of its
connector's assets below its position, which /metrics' lag reads) equal a probe of the assets at its
position after a commit and a change of the assets' sums race each other, in either order
(prefix_sums.sql: tidemark_watermark_done, tidemark_watermarks_resum).

The commit moves the watermark past an asset whose weight another transaction changes, neither
committed yet: whichever holds its locks first, the other must end with the sums both left.
"""

import threading
import time

import psycopg2
import pytest
from django.db import connection

from inventory.models import Watermark
from inventory.services import lifecycle
from tests.support.factories import make_assets, make_job

pytestmark = pytest.mark.django_db(transaction=True)


def _session():
    conn = psycopg2.connect(**connection.get_connection_params())
    conn.autocommit = False
    return conn


def _pid(conn) -> int:
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _waits_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


def _in_thread(conn, sql: str, params) -> threading.Thread:
    """Run `sql` on `conn` and commit it, in a thread (it is expected to wait for a lock)."""
    failures = []

    def run():
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
            conn.commit()
        except Exception as exc:  # reported by the test
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.failures = failures
    thread.start()
    return thread


def _until_waiting(pid: int, thread: threading.Thread, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not _waits_for_a_lock(pid):
        assert thread.is_alive(), f"the session finished without waiting: {thread.failures}"
        assert time.monotonic() < deadline, "the session never waited for the other's lock"
        time.sleep(0.02)


def _stored_and_probed(job) -> tuple[tuple, tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.done_count, w.done_weight, coalesce(b.cum_count, 0),"
            " coalesce(b.cum_weight, 0)"
            " FROM inventory_watermark AS w JOIN inventory_job AS j ON j.id = w.job_id"
            " LEFT JOIN LATERAL tidemark_asset_before(j.connector_id, w.position) AS b ON true"
            " WHERE w.job_id = %s",
            [job.pk],
        )
        stored_count, stored_weight, count, weight = cursor.fetchone()
    return (stored_count, int(stored_weight)), (count, int(weight))


COMMIT = "SELECT id FROM tidemark_succeed(%s, %s, '{}'::jsonb, NULL)"
REWEIGH = "UPDATE inventory_asset SET weight = %s WHERE id = %s"


@pytest.fixture
def running_batch():
    """A job over four assets of weight 10, its first batch (the first two) running."""
    job = make_job(batch_weight=20, max_items=2)
    assets = make_assets(job.connector, [10, 10, 10, 10])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert batch.span.upper == assets[1].pk + 1
    return job, assets, batch


@pytest.mark.parametrize("first", ["commit", "reweigh"])
def test_a_commit_and_a_weight_change_below_its_new_position_leave_the_sums_a_probe_reads(
    running_batch, first
):
    job, assets, batch = running_batch
    changed = assets[1]  # above the watermark before the commit, below it after
    holder, waiter = _session(), _session()
    try:
        held, waiting = (COMMIT, REWEIGH) if first == "commit" else (REWEIGH, COMMIT)
        params = {COMMIT: [batch.pk, batch.attempt], REWEIGH: [500, changed.pk]}
        waiter_pid = _pid(waiter)
        with holder.cursor() as cursor:
            cursor.execute(held, params[held])
        thread = _in_thread(waiter, waiting, params[waiting])
        _until_waiting(waiter_pid, thread)
        holder.commit()
        thread.join(30)
        assert not thread.is_alive() and not thread.failures, thread.failures
    finally:
        holder.close()
        waiter.close()
    watermark = Watermark.objects.get(job=job)
    assert watermark.position == batch.span.upper
    stored, probed = _stored_and_probed(job)
    assert probed == (2, 510)
    assert stored == probed
