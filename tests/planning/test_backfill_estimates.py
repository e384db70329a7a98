"""One estimate of a backfill's duration (services/estimates.py): the dashboard's preview, the API's
preview, and a running backfill's ETA on the backfills page and in the API agree on the same data,
and a fast backfill's ETA is seconds, not the hour the job's hourly commit rate suggested."""

import re
from datetime import timedelta

import pytest
from django.test import Client

from inventory.models import Batch, BatchStatus
from inventory.services import estimates, lifecycle
from tests.support.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db

SECONDS_PER_BATCH = 0.5


def _took(batch_id: int, seconds: float) -> None:
    batch = Batch.objects.get(pk=batch_id)
    Batch.objects.filter(pk=batch_id).update(
        started_at=batch.finished_at - timedelta(seconds=seconds)
    )


def _run_one(job) -> Batch:
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    _took(batch.pk, SECONDS_PER_BATCH)
    return batch


def test_duration_is_waves_of_batches_and_no_faster_than_the_throttle():
    work = estimates.Work(batches=5, weight=500, concurrency=2)
    assert estimates.duration(work, per_batch=2.0) == timedelta(seconds=6)  # 3 waves
    throttled = estimates.Work(batches=5, weight=500, concurrency=2, throttle=100)
    assert estimates.duration(throttled, per_batch=2.0) == timedelta(minutes=5)
    assert estimates.duration(work, per_batch=None) is None
    assert estimates.duration(estimates.Work(0, 0, 1), per_batch=None) == timedelta(0)


def test_preview_and_running_backfill_give_the_same_estimate_and_a_fast_one_is_seconds(
    role_users,
):
    connector, job = make_inventory(weights=[50] * 10, batch_weight=100, max_items=10)
    for _ in range(2):  # the job's own batches: each took half a second
        _run_one(job)
    ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    api = token_client(role_users["operator"])
    plan = {"job": job.name, "range_start": ids[0], "range_end": ids[-1]}

    preview = api.post("/api/v1/backfills/preview/", plan, format="json").json()
    assert preview["batch_count"] == 5
    assert preview["estimated_seconds"] == 5 * SECONDS_PER_BATCH
    wide = api.post(
        "/api/v1/backfills/preview/", {**plan, "max_concurrency": 5}, format="json"
    ).json()
    assert wide["estimated_seconds"] == SECONDS_PER_BATCH

    # the dashboard's preview says the same
    client = Client()
    client.force_login(role_users["operator"])
    form = {**plan, "by": "ids", "max_concurrency": 1, "priority": 0}
    page = client.post("/backfills/preview/", form).content.decode()
    assert "Estimated duration about 2.5 s" in page

    created = api.post("/api/v1/backfills/", {**plan, "priority": 5}, format="json").json()
    assert created["progress"]["eta_seconds"] == preview["estimated_seconds"]

    # two of its five batches done: three left, at half a second each
    for _ in range(2):
        assert _run_one(job).backfill_id == created["id"]
    shown = api.get(f"/api/v1/backfills/{created['id']}/").json()
    assert shown["progress"]["eta_seconds"] == 3 * SECONDS_PER_BATCH
    listed = api.get("/api/v1/backfills/", {"job": job.name}).json()["results"][0]
    assert listed["progress"]["eta_seconds"] == 3 * SECONDS_PER_BATCH

    # the backfills page shows that ETA, not one from the job's hourly commit rate (hours)
    page = client.get("/backfills/").content.decode()
    cells = re.search(rf'<tr id="backfill-{created["id"]}".*?</tr>', page, re.S).group(0)
    assert "1.5 s" in cells, cells
    assert not re.search(r"\b\d+ h\b", cells), cells

    for _ in range(3):
        _run_one(job)
    done = api.get(f"/api/v1/backfills/{created['id']}/").json()
    assert done["progress"]["batches_done"] == 5
    assert done["progress"]["eta_seconds"] == 0
    assert not Batch.objects.filter(job=job).exclude(status=BatchStatus.SUCCEEDED).exists()
