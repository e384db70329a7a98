"""The publish fence keeps one connection per thread between publishes (workers/spark/fence.py),
and still publishes when that connection died in between (a terminated backend, a restarted
server): each publish stays one transaction of its own. Batches run in this process through the
real lifecycle and the real fence, so these tests commit (transaction=True)."""

import pytest
from django.db import connection

from inventory.models import Batch, BatchStatus, Job
from inventory.services import lifecycle
from tests.support.files_job import expected_rows, make_files_job, run_and_commit, sink_rows
from workers.spark.fence import FENCE_APPLICATION

pytestmark = pytest.mark.django_db(transaction=True)


_EARLIER: set[int] = set()


@pytest.fixture(autouse=True)
def no_earlier_fence_connection():
    """Earlier tests in this process leave the fence's kept connection of this thread open: close
    it, and leave out of the counts any backend that was there before the test began (a closed
    connection's backend may linger in pg_stat_activity for a moment)."""
    from workers.spark import fence

    for dsn, (_, conn) in list(getattr(fence._kept, "connections", {}).items()):
        fence._discard(dsn, conn)
    _EARLIER.clear()
    _EARLIER.update(_all_fence_backends())
    yield


def _all_fence_backends() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            [FENCE_APPLICATION],
        )
        return {row[0] for row in cursor.fetchall()}


def fence_backends() -> set[int]:
    """The server processes of the fence's connections to this database opened by this test."""
    return _all_fence_backends() - _EARLIER


def files_job(tmp_path, name: str, sink: dict, *, items: int):
    job, _ = make_files_job(tmp_path, name, sink, items=items, max_items=1)
    # no heartbeat runs here: a lease long enough for a slow machine's Spark write
    Job.objects.filter(pk=job.pk).update(lease_seconds=3600)
    job.refresh_from_db()
    return job


def run_next(spark, job) -> Batch:
    batch = lifecycle.batch_acquire(job=job, worker="test")
    assert batch is not None
    run_and_commit(spark, batch)
    return batch


def test_batches_published_one_after_another_share_one_fence_connection(spark, tmp_path):
    sink = {"kind": "files", "path": str(tmp_path / "sink")}
    job = files_job(tmp_path, "kept", sink, items=3)
    backends = []
    for _ in range(3):
        run_next(spark, job)
        backends.append(fence_backends())
    assert len(backends[0]) == 1
    assert backends[0] == backends[1] == backends[2]
    assert set(Batch.objects.filter(job=job).values_list("status", flat=True)) == {
        BatchStatus.SUCCEEDED
    }
    assert sink_rows(spark, sink) == expected_rows(range(3))


def test_a_publish_after_its_kept_connection_was_terminated_opens_a_new_one(spark, tmp_path):
    sink = {"kind": "files", "path": str(tmp_path / "sink")}
    job = files_job(tmp_path, "terminated", sink, items=2)
    run_next(spark, job)
    (first,) = fence_backends()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])

    second = run_next(spark, job)

    second.refresh_from_db()
    assert second.status == BatchStatus.SUCCEEDED
    assert second.published_attempt == second.attempt
    assert first not in fence_backends()
    assert sink_rows(spark, sink) == expected_rows(range(2))
