"""backfills/: preview without creating, create, list with progress, pause/resume/cancel; ranges
by item ids or by time."""

import os
from datetime import UTC, datetime, timedelta

import pytest

from inventory.models import Asset, Backfill, BackfillStatus, Batch, BatchStatus
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.jobs import job_create
from tests.support.api_support import make_inventory, token_client
from tests.support.factories import ConnectorFactory, make_job
from tests.support.table_source import SOURCE_ENV, insert, table_connector
from tests.support.table_source import T0 as TABLE_T0

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
    assert body["weight_unit"] == "bytes"  # a files connector's weight is its files' size
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

    batch = lifecycle.batch_acquire(job=job, worker="w")  # priority > 0: the backfill goes first
    assert batch.backfill_id == created["id"]
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)

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
    if change == {"job": "missing"}:  # the words every other unknown name gets
        assert response.json()["job"] == ["there is no job named 'missing'"]


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


# ---- by time -----------------------------------------------------------------------------------

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _preview(user, body):
    return token_client(user).post("/api/v1/backfills/preview/", body, format="json")


def test_files_are_backfilled_by_registration_time(role_users):
    connector, job = make_inventory(weights=[10] * 6)
    ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    for hours, pk in enumerate(ids):  # registered an hour apart
        Asset.objects.filter(pk=pk).update(discovered_at=T0 + timedelta(hours=hours))
    # 01:00 to 03:00 inclusive, in another zone: the second, third and fourth file
    body = {
        "job": job.name,
        "time_start": "2026-03-01T02:00:00+01:00",
        "time_end": "2026-03-01T03:00:00Z",
    }
    preview = _preview(role_users["viewer"], body)
    assert preview.status_code == 200, preview.content
    answer = preview.json()
    assert (answer["range_start"], answer["range_end"]) == (ids[1], ids[3])
    assert answer["total_items"] == 3
    assert answer["requested"] == {
        "by": "time",
        "basis": "registration time",
        "start": "2026-03-01T02:00:00+01:00",
        "end": "2026-03-01T03:00:00+00:00",
    }
    assert not Backfill.objects.exists()

    created = token_client(role_users["operator"]).post("/api/v1/backfills/", body, format="json")
    assert created.status_code == 201, created.content
    backfill = created.json()
    assert (backfill["range_start"], backfill["range_end"]) == (ids[1], ids[3])
    assert backfill["requested"] == answer["requested"]
    assert Backfill.objects.get(pk=backfill["id"]).requested["basis"] == "registration time"


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"range_start": 1, "range_end": 2}, "time_start", "not both"),
        ({"time_end": None}, "time_end", "required with time_start"),
        ({"time_start": "2026-03-01T01:00:00"}, "time_start", "no UTC offset"),
        ({"time_start": "yesterday"}, "time_start", "ISO 8601"),
        ({"time_start": "2026-03-02T00:00:00Z"}, "time_end", "before time_start"),
        # nothing was registered then
        (
            {"time_start": "2025-01-01T00:00:00Z", "time_end": "2025-01-02T00:00:00Z"},
            "range_start",
            "no item whose registration time is in [2025-01-01T00:00:00+00:00",
        ),
    ],
)
def test_a_bad_time_range_is_a_400_naming_the_field(role_users, change, field, reason):
    connector, job = make_inventory(weights=[10] * 2)
    connector.assets.update(discovered_at=T0 + timedelta(hours=1))
    body = {"job": job.name, "time_start": "2026-03-01T00:00:00Z", "time_end": T0.isoformat()}
    body = {k: v for k, v in {**body, **change}.items() if v is not None}  # None: left out
    for url in ("/api/v1/backfills/preview/", "/api/v1/backfills/"):
        response = token_client(role_users["operator"]).post(url, body, format="json")
        assert response.status_code == 400, response.content
        assert reason in " ".join(response.json()[field]), response.json()
    assert not Backfill.objects.exists()


def test_neither_ids_nor_times_is_a_400_naming_range_start(role_users):
    _, job = make_inventory()
    response = _preview(role_users["viewer"], {"job": job.name})
    assert response.status_code == 400
    assert "time_start" in response.json()["range_start"][0]


def test_a_kafka_job_is_not_backfilled_by_time(role_users):
    connector = ConnectorFactory(
        name="clicks", kind="kafka", config={"bootstrap": "localhost:9092", "topic": "clicks"}
    )
    job = make_job(
        connector=connector, name="clicks-job", batch_weight=100, watermark_type="key_value"
    )
    body = {"job": job.name, "time_start": T0.isoformat(), "time_end": T0.isoformat()}
    response = _preview(role_users["viewer"], body)
    assert response.status_code == 400
    assert "carry no timestamps" in response.json()["time_start"][0]


def test_a_job_output_job_is_backfilled_by_its_upstreams_commit_times(role_users, tmp_path):
    upstream_connector, upstream = make_inventory(
        name="up", weights=[10] * 4, max_items=1, sink={"kind": "files", "path": str(tmp_path)}
    )
    for _ in range(4):
        batch = lifecycle.batch_acquire(job=upstream, worker="w")
        lifecycle.batch_succeed(
            batch_id=batch.pk,
            attempt=batch.attempt,
            result={"rows_out": 1, "location": str(tmp_path / str(batch.pk))},
        )
    commits = list(
        Batch.objects.filter(job=upstream).order_by("commit_seq").values_list("pk", "commit_seq")
    )
    assert [seq for _pk, seq in commits] == [1, 2, 3, 4]
    for days, (pk, _seq) in enumerate(commits):  # committed a day apart
        Batch.objects.filter(pk=pk).update(finished_at=T0 + timedelta(days=days))
    downstream = job_create(
        name="down",
        connector=connector_create(name="down-src", kind="job_output", config={"job": "up"}),
        batch_weight=100,
    )
    body = {
        "job": downstream.name,
        "time_start": (T0 + timedelta(days=1)).isoformat(),
        "time_end": (T0 + timedelta(days=2, hours=12)).isoformat(),
    }
    answer = _preview(role_users["viewer"], body).json()
    assert (answer["range_start"], answer["range_end"]) == (2, 3), answer
    assert answer["requested"]["basis"] == "commit time of job up"
    assert answer["total_items"] == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("source_dsn")
def test_a_table_job_is_backfilled_by_its_timestamp_column(role_users):
    insert(os.environ[SOURCE_ENV], range(1, 61))  # updated_at = T0 + id seconds
    connector = table_connector(name="orders-by-time", column="updated_at", slice_rows=10)
    job = job_create(name="orders-t", connector=connector, batch_weight=100)
    discover(connector)
    slice_ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    assert len(slice_ids) == 6  # rows 1-10, 11-20, ... by time
    # rows 15 to 31: the second, third and fourth slice
    body = {
        "job": job.name,
        "time_start": (TABLE_T0 + timedelta(seconds=15)).isoformat(),
        "time_end": (TABLE_T0 + timedelta(seconds=31)).isoformat(),
    }
    answer = _preview(role_users["viewer"], body).json()
    assert (answer["range_start"], answer["range_end"]) == (slice_ids[1], slice_ids[3]), answer
    assert answer["requested"]["basis"] == "column updated_at"
    assert answer["total_weight"] == 30  # three slices of ten rows
    assert answer["weight_unit"] == "rows"
    # the first instant past the last row: no slice holds it
    late = (TABLE_T0 + timedelta(seconds=61)).isoformat()
    empty = _preview(role_users["viewer"], {**body, "time_start": late, "time_end": late})
    assert empty.status_code == 400
    assert "column updated_at" in empty.json()["range_start"][0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("source_dsn")
def test_a_table_read_by_an_integer_column_is_backfilled_by_value(role_users):
    insert(os.environ[SOURCE_ENV], range(1, 26))
    connector = table_connector(name="orders-by-id", slice_rows=10)  # column id
    job = job_create(name="orders-i", connector=connector, batch_weight=100)
    discover(connector)
    slice_ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    body = {"job": job.name, "time_start": 11, "time_end": 20}
    answer = _preview(role_users["viewer"], body).json()
    assert (answer["range_start"], answer["range_end"]) == (slice_ids[1], slice_ids[1]), answer
    assert answer["requested"] == {
        "by": "value",
        "basis": "value of column id",
        "start": 11,
        "end": 20,
    }


def test_a_backfill_created_with_a_preview_fingerprint_runs_that_plan_or_is_refused(role_users):
    from tests.support.factories import make_assets

    connector, job = make_inventory(weights=[60, 30, 30])
    first, last = _range(connector)
    api = token_client(role_users["operator"])
    request = {"job": job.name, "range_start": first, "range_end": last + 10, "batch_weight": 100}
    preview = api.post("/api/v1/backfills/preview/", request, format="json").json()
    assert len(preview["fingerprint"]) == 16
    again = api.post("/api/v1/backfills/preview/", request, format="json").json()
    assert again["fingerprint"] == preview["fingerprint"]  # the same plan, the same name

    make_assets(connector, [90])  # an item arrives inside the range: the plan is another one
    refused = api.post(
        "/api/v1/backfills/",
        {**request, "fingerprint": preview["fingerprint"], "reason": "r"},
        format="json",
    )
    assert refused.status_code == 409, refused.content
    body = refused.json()
    assert body["code"] == "planchanged"
    assert body["plan"]["total_items"] == preview["total_items"] + 1
    assert body["plan"]["fingerprint"] != preview["fingerprint"]
    assert preview["fingerprint"] in body["detail"]
    assert not Backfill.objects.filter(job=job).exists()

    created = api.post(
        "/api/v1/backfills/",
        {**request, "fingerprint": body["plan"]["fingerprint"], "reason": "r"},
        format="json",
    )
    assert created.status_code == 201, created.content
    planned = Batch.objects.filter(backfill_id=created.json()["id"]).order_by("span")
    assert [[b.span.lower, b.span.upper - 1, b.item_count, b.weight] for b in planned] == [
        [p["range_start"], p["range_end"], p["item_count"], p["weight"]]
        for p in body["plan"]["batches"]
    ]
    malformed = api.post("/api/v1/backfills/", {**request, "fingerprint": "'; drop"}, format="json")
    assert malformed.status_code == 400 and "fingerprint" in malformed.json()
