"""jobs/: CRUD by name, run/, detail with lag, watermark read and correction, history."""

import pytest

from inventory.models import Batch, BatchStatus, Job, Watermark, WatermarkEvent
from inventory.services import lifecycle
from tests.support.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db


def _commit_batches(job, count):
    done = []
    for _ in range(count):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
        done.append(batch)
    return done


def test_it_creates_a_job_with_its_watermark(role_users):
    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    response = api.post(
        "/api/v1/jobs/",
        {"name": "hourly", "connector": connector.name, "batch_weight": 500, "max_items": 20},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["connector"] == connector.name
    assert body["watermark"]["position"] == 0
    assert Watermark.objects.filter(job__name="hourly").exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"batch_weight": 0}, "batch_weight"),
        ({"batch_weight": 2**70}, "batch_weight"),
        ({"max_items": -1}, "max_items"),
        # a job without attempts was a 409 from the database's check constraint, and a lease of
        # 0 seconds was accepted: every batch's lease expired as it was taken
        ({"max_attempts": 0}, "max_attempts"),
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"connector": "no-such-connector"}, "connector"),
        ({"watermark_type": "float"}, "watermark_type"),
        ({"name": "Not A Slug!"}, "name"),
        ({"sink": {"path": "/out", "password": "x"}}, "sink.password"),
        ({"sink": {"kind": "s3", "path": "/out"}}, "sink"),
        ({"sink": {"kind": "postgres", "table": "t;drop", "dsn_env": "X"}}, "sink.table"),
        (
            {"sink": {"kind": "postgres", "table": "t", "mode": "apend", "dsn_env": "X"}},
            "sink.mode",
        ),
        (
            {"sink": {"kind": "postgres", "table": "t", "mode": "upsert", "dsn_env": "X"}},
            "sink.key",
        ),
    ],
)
def test_bad_job_input_is_a_400_naming_the_field(role_users, change, field):
    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    payload = {"name": "hourly", "connector": connector.name, "batch_weight": 500, **change}
    response = api.post("/api/v1/jobs/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not Job.objects.filter(name="hourly").exists()
    if field == "connector":  # the words every other unknown name gets
        assert response.json()["connector"] == ["there is no connector named 'no-such-connector'"]


@pytest.mark.parametrize(
    "change",
    [{"max_attempts": 0}, {"lease_seconds": 0}, {"batch_weight": -1}, {"lookback": -1}],
)
def test_a_setting_below_its_minimum_is_a_400_on_change_too(role_users, change):
    _, job = make_inventory()
    api = token_client(role_users["admin"])
    response = api.patch(f"/api/v1/jobs/{job.name}/", change, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == list(change), response.json()
    before = Job.objects.get(pk=job.pk)
    assert (before.max_attempts, before.lease_seconds) == (job.max_attempts, job.lease_seconds)


def test_the_schema_gives_the_minimums_the_api_enforces(role_users):
    schema = token_client(role_users["viewer"]).get("/api/schema/?format=json").json()
    fields = schema["components"]["schemas"]["JobWriteRequest"]["properties"]
    minimums = {name: fields[name].get("minimum") for name in fields if "minimum" in fields[name]}
    assert minimums == {
        "start_position": -(2**63),
        "batch_weight": 1,
        "max_items": 1,
        "max_attempts": 1,
        "retry_backoff_seconds": 0,
        "lease_seconds": 1,
        "schedule_seconds": 1,
        "max_concurrency": 1,
        "lookback": 0,
        "freshness_target_seconds": 1,
        "freshness_target_items": 0,
    }


def test_job_detail_shows_watermark_lag_and_batch_counts(role_users):
    _, job = make_inventory(weights=[40] * 6)  # 3 batches of 2 items (budget 100)
    _commit_batches(job, 1)
    api = token_client(role_users["viewer"])
    body = api.get(f"/api/v1/jobs/{job.name}/").json()
    assert body["lag"] == {"items": 4, "weight": 160}
    assert body["batch_counts"]["succeeded"] == 1
    assert body["blocked_by"] is None
    assert body["watermark"]["value"] == job.connector.assets.order_by("id")[1].id
    assert api.get("/api/v1/jobs/missing/").status_code == 404
    listing = api.get("/api/v1/jobs/", {"connector__name": job.connector.name}).json()
    assert [j["name"] for j in listing["results"]] == [job.name]


def test_job_detail_names_the_dead_batch_the_watermark_waits_for(role_users):
    _, job = make_inventory(max_attempts=1)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=batch.pk, attempt=batch.attempt, error={"message": "boom"})
    body = token_client(role_users["viewer"]).get(f"/api/v1/jobs/{job.name}/watermark/").json()
    assert body["blocked_by"]["id"] == batch.pk
    assert body["blocked_by"]["status"] == "dead"


def test_it_changes_settings_but_not_fixed_fields(role_users):
    _, job = make_inventory()
    api = token_client(role_users["admin"])
    response = api.patch(f"/api/v1/jobs/{job.name}/", {"batch_weight": 250}, format="json")
    assert response.status_code == 200, response.content
    job.refresh_from_db()
    assert job.batch_weight == 250
    response = api.patch(f"/api/v1/jobs/{job.name}/", {"watermark_type": "datetime"}, format="json")
    assert response.status_code == 400
    assert "watermark_type" in response.json()


def test_deleting_a_job_with_a_running_batch_is_a_409(role_users):
    _, job = make_inventory()
    batch = lifecycle.batch_acquire(job=job, worker="w")
    api = token_client(role_users["admin"])
    assert api.delete(f"/api/v1/jobs/{job.name}/").status_code == 409
    lifecycle.batch_cancel(batch_id=batch.pk, actor="t")
    assert api.delete(f"/api/v1/jobs/{job.name}/").status_code == 204
    assert not Job.objects.filter(pk=job.pk).exists()


def test_run_plans_new_batches_now(role_users):
    _, job = make_inventory(max_concurrency=2)
    response = token_client(role_users["operator"]).post(f"/api/v1/jobs/{job.name}/run/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert len(body["planned"]) == 2
    assert set(Batch.objects.filter(job=job).values_list("status", flat=True)) == {"queued"}


def test_run_of_a_paused_job_plans_nothing_and_says_why(role_users):
    _, job = make_inventory(paused=True)
    body = token_client(role_users["operator"]).post(f"/api/v1/jobs/{job.name}/run/").json()
    assert body["planned"] == []
    assert "paused" in body["reason"]


def test_a_watermark_correction_is_recorded_with_actor_and_reason(role_users):
    _, job = make_inventory(weights=[40] * 6)
    committed = _commit_batches(job, 2)
    api = token_client(role_users["admin"])
    back_to = committed[0].last_item

    refused = api.post(
        f"/api/v1/jobs/{job.name}/watermark/",
        {"value": back_to, "reason": "bad output"},
        format="json",
    )
    assert refused.status_code == 400
    assert "replay" in refused.json()

    no_reason = api.post(
        f"/api/v1/jobs/{job.name}/watermark/",
        {"value": back_to, "replay": True},
        format="json",
    )
    assert no_reason.status_code == 400
    assert "reason" in no_reason.json()

    response = api.post(
        f"/api/v1/jobs/{job.name}/watermark/",
        {"value": back_to, "reason": "bad output", "replay": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["value"] == back_to
    event = WatermarkEvent.objects.filter(watermark__job=job).first()
    assert (event.source, event.actor, event.reason, event.is_replay) == (
        "api",
        "admin-user",
        "bad output",
        True,
    )
    assert Batch.objects.get(pk=committed[1].pk).status == BatchStatus.SUPERSEDED

    history = api.get(f"/api/v1/jobs/{job.name}/watermark/history/").json()
    sources = [e["source"] for e in history["results"]]
    assert sources == ["api", "batch", "batch"]
    assert history["results"][0]["new_value"] == back_to


def test_a_correction_of_the_wrong_type_names_the_value(role_users):
    _, job = make_inventory()
    response = token_client(role_users["admin"]).post(
        f"/api/v1/jobs/{job.name}/watermark/",
        {"value": "yesterday", "reason": "typo"},
        format="json",
    )
    assert response.status_code == 400
    assert "value" in response.json()
    assert not WatermarkEvent.objects.filter(watermark__job=job).exists()


def test_an_operator_pauses_and_resumes_a_job(role_users):
    _, job = make_inventory()
    client = token_client(role_users["operator"])
    response = client.post(f"/api/v1/jobs/{job.name}/pause/")
    assert response.status_code == 200 and response.json()["paused"] is True
    assert (
        client.post(f"/api/v1/jobs/{job.name}/acquire/", {"worker": "x"}, format="json").status_code
        == 409
    )
    response = client.post(f"/api/v1/jobs/{job.name}/resume/")
    assert response.status_code == 200 and response.json()["paused"] is False
    assert (
        client.post(f"/api/v1/jobs/{job.name}/acquire/", {"worker": "x"}, format="json").status_code
        == 200
    )


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"value": 2**64}, "value"), ({"value": -5, "replay": True}, "value")],
)
def test_a_correction_out_of_range_or_below_the_start_is_a_400_naming_the_field(
    role_users, payload, field
):
    _, job = make_inventory()
    response = token_client(role_users["admin"]).post(
        f"/api/v1/jobs/{job.name}/watermark/", {"reason": "r", **payload}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()) == [field], response.json()
    assert not WatermarkEvent.objects.filter(watermark__job=job).exists()


def test_a_datetime_correction_by_position_alone_needs_no_value(role_users):
    # docs/api.md: "give either a position ... or a value alone"; the API required `value`
    _, job = make_inventory(weights=[40] * 6, watermark_type="datetime")
    committed = []
    for hour in (1, 2, 3):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(
            batch_id=batch.pk, attempt=batch.attempt, watermark_value=f"2026-01-01T0{hour}:00:00Z"
        )
        committed.append(batch)
    api = token_client(role_users["admin"])
    boundary = committed[0].span.upper
    response = api.post(
        f"/api/v1/jobs/{job.name}/watermark/",
        {"position": boundary, "reason": "rewrite hours 2 and 3", "replay": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["position"] == boundary
    assert response.json()["value"].startswith("2026-01-01T01:00:00")
    assert Batch.objects.get(pk=committed[2].pk).status == BatchStatus.SUPERSEDED
    # an int watermark still needs one of the two
    _, int_job = make_inventory(name="ints")
    neither = api.post(f"/api/v1/jobs/{int_job.name}/watermark/", {"reason": "r"}, format="json")
    assert neither.status_code == 400 and list(neither.json()) == ["value"], neither.json()


def test_the_schema_does_not_require_a_correction_value(role_users):
    schema = token_client(role_users["viewer"]).get("/api/schema/?format=json").json()
    required = schema["components"]["schemas"]["WatermarkCorrectionRequest"]["required"]
    assert required == ["reason"]
