"""backfills/: preview without creating, create, list with progress, pause/resume/cancel."""

import pytest

from inventory.models import Backfill, BackfillStatus, Batch, BatchStatus
from inventory.services import lifecycle as batches
from tests.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db


def _range(connector):
    ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    return ids[0], ids[-1]


def test_preview_returns_the_plan_without_creating_anything(role_users):
    connector, job = make_inventory(weights=[60, 30, 30, 90, 10])
    first, last = _range(connector)
    response = token_client(role_users["viewer"]).post(
        "/api/v1/backfills/preview/",
        {"job": job.name, "range_start": first, "range_end": last, "batch_weight": 100},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["batch_count"] == 3
    assert body["total_weight"] == 220
    assert body["total_items"] == 5
    assert [b["weight"] for b in body["batches"]] == [90, 30, 100]
    assert body["batches"][0]["range_start"] == first
    assert body["batches"][-1]["range_end"] == last
    assert not Backfill.objects.exists()
    assert not Batch.objects.exists()


def test_it_creates_a_backfill_and_lists_its_progress(role_users):
    connector, job = make_inventory(weights=[50] * 4)
    first, last = _range(connector)
    api = token_client(role_users["operator"])
    response = api.post(
        "/api/v1/backfills/",
        {
            "job": job.name,
            "range_start": first,
            "range_end": last,
            "priority": 5,
            "reason": "reprocess after schema fix",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["created_by"] == "operator-user"
    assert created["progress"]["batches_total"] == 2
    assert created["progress"]["percent"] == 0.0

    batch = batches.batch_acquire(job=job, worker="w")  # priority > 0: the backfill goes first
    assert batch.backfill_id == created["id"]
    batches.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)

    listing = api.get("/api/v1/backfills/", {"job": job.name}).json()
    progress = listing["results"][0]["progress"]
    assert (progress["batches_done"], progress["weight_done"], progress["percent"]) == (
        1,
        100,
        50.0,
    )
    assert api.get(f"/api/v1/backfills/{created['id']}/").json()["id"] == created["id"]


def test_a_backfill_range_outside_the_jobs_data_is_a_409(role_users):
    connector, job = make_inventory()
    _, last = _range(connector)
    api = token_client(role_users["operator"])
    body = {"job": job.name, "range_start": last + 100, "range_end": last + 200}
    for url in ("/api/v1/backfills/preview/", "/api/v1/backfills/"):
        response = api.post(url, body, format="json")
        assert response.status_code == 409
        assert "no items" in response.json()["detail"]
    assert not Backfill.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"range_end": 0, "range_start": 5}, "range_end"),
        ({"job": "missing"}, "job"),
        ({"batch_weight": 0}, "batch_weight"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"priority": 40000}, "priority"),
        ({"range_start": "abc"}, "range_start"),
    ],
)
def test_bad_backfill_input_is_a_400_naming_the_field(role_users, change, field):
    _, job = make_inventory()
    body = {"job": job.name, "range_start": 0, "range_end": 100, **change}
    response = token_client(role_users["operator"]).post("/api/v1/backfills/", body, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()


def test_pause_resume_and_cancel(role_users):
    connector, job = make_inventory()
    first, last = _range(connector)
    api = token_client(role_users["operator"])
    backfill = api.post(
        "/api/v1/backfills/",
        {"job": job.name, "range_start": first, "range_end": last},
        format="json",
    ).json()
    url = f"/api/v1/backfills/{backfill['id']}"
    assert api.post(f"{url}/pause/").json()["status"] == "paused"
    assert api.post(f"{url}/pause/").status_code == 409
    assert api.post(f"{url}/resume/").json()["status"] == "running"
    assert api.post(f"{url}/cancel/").json()["status"] == "cancelled"
    assert api.post(f"{url}/resume/").status_code == 409
    assert Backfill.objects.get(pk=backfill["id"]).status == BackfillStatus.CANCELLED
    assert set(
        Batch.objects.filter(backfill_id=backfill["id"]).values_list("status", flat=True)
    ) == {BatchStatus.CANCELLED}
    assert api.post("/api/v1/backfills/999999/pause/").status_code == 404
