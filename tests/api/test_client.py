"""External processing through the HTTP API with tidemark_client, alongside a Celery worker.

A client outside Tidemark (tidemark_client over a real HTTP server) acquires, heartbeats and
succeeds batches of a job while a real Celery worker (Spark) processes other batches of the same
job. Afterwards the job's batches cover every item exactly once: no overlap, no gap, and the
watermark sits on the last item.
"""

import time

import pytest
from rest_framework.authtoken.models import Token

import tests.support.worker_processors  # noqa: F401 - the worker imports them; so do we, for job checks
from inventory.models import Asset, Batch, BatchStatus, Watermark
from inventory.services import dispatch
from inventory.services.connectors import connector_create
from inventory.sources import files
from tests.support.factories import make_job
from tests.support.worker_fixtures import wait_until, write_orders
from tidemark_client import Tidemark

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_BATCHES = 4


def test_an_external_client_and_a_celery_worker_share_a_job_without_overlap_or_gap(
    tmp_path, live_server, celery_worker, role_users
):
    landing = tmp_path / "landing"
    for n in range(12):
        write_orders(landing / f"orders-{n:02d}.parquet", first_id=n * 100, count=5, day=1 + n)
    connector = connector_create(name="shared-orders", kind="files", config={"path": str(landing)})
    assert files.directory_discover(connector=connector) == 12
    job = make_job(
        connector=connector,
        name="shared-job",
        batch_weight=10**9,
        max_items=1,
        max_concurrency=2,
        sink={"kind": "files", "path": str(tmp_path / "sink")},
    )
    token = Token.objects.create(user=role_users["operator"])
    client = Tidemark(live_server.url, token=token.key, timeout=30)

    def worker_committed() -> bool:
        return (
            Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED)
            .exclude(worker="external-etl")
            .exists()
        )

    # the client holds a batch before the worker starts on the others, and keeps it until the
    # worker has committed one beside it: the two really run at once, however fast either is
    batch = client.acquire(job.name, worker="external-etl", lease_seconds=30)
    assert batch is not None
    dispatch.job_run(job=job)
    taken = []
    while batch is not None:
        assert len(batch.locations) == 1
        with client.keep_alive(batch, every=0.3) as lost:
            if not taken:
                wait_until(worker_committed, timeout=120, message="a worker batch to commit")
            time.sleep(0.5)  # "processing" somewhere else
            client.heartbeat(batch)
        assert not lost.is_set()
        committed = client.succeed(batch, result={"rows_out": 5, "by": "external-etl"})
        assert committed["status"] == "succeeded"
        taken.append(batch.id)
        # more while there is any, up to CLIENT_BATCHES (None: the worker has the rest)
        more = len(taken) < CLIENT_BATCHES
        batch = client.acquire(job.name, worker="external-etl", lease_seconds=30) if more else None

    last = Asset.objects.filter(connector=connector).order_by("-id").first()

    def settled():
        dispatch.job_run(job=job)  # what beat does: keep the job's work moving
        busy = Batch.objects.filter(
            job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED]
        )
        return Watermark.objects.get(job=job).value == last.pk and not busy.exists()

    wait_until(settled, timeout=180, interval=1.0, message="the worker to finish the job")

    done = list(Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).order_by("span"))
    assert not Batch.objects.filter(job=job).exclude(status=BatchStatus.SUCCEEDED).exists()
    # no overlap, no gap: consecutive spans, from the job's start to past the last item
    assert done[0].span.lower <= Asset.objects.filter(connector=connector).order_by("id")[0].pk
    for before, after in zip(done, done[1:], strict=False):
        assert before.span.upper == after.span.lower
    assert done[-1].span.upper == last.pk + 1
    assert sum(b.item_count for b in done) == 12

    by_client = [b for b in done if b.worker == "external-etl"]
    by_worker = [b for b in done if b.worker != "external-etl"]
    assert sorted(b.pk for b in by_client) == sorted(taken)
    assert len(by_worker) == 12 - len(taken) >= 1
    assert all(b.result.get("by") == "external-etl" for b in by_client)
    assert all("rows_out" in b.result and "by" not in b.result for b in by_worker)
    # "while": at least one client batch ran at the same time as a worker batch
    assert any(
        c.started_at < w.finished_at and w.started_at < c.finished_at
        for c in by_client
        for w in by_worker
    )
