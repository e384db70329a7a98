"""batches/ and external processing: acquire, heartbeat, succeed, fail; retry, cancel, skip."""

from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import Batch, BatchStatus, Watermark
from inventory.services import lifecycle
from tests.support.api_support import make_inventory, session_client, token_client

pytestmark = pytest.mark.django_db


def _acquire(api, job, **body):
    response = api.post(f"/api/v1/jobs/{job.name}/acquire/", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_acquire_hands_out_a_batch_with_its_items_and_lease(role_users):
    connector, job = make_inventory(weights=[40, 40, 40])
    api = token_client(role_users["operator"])
    batch = _acquire(api, job, worker="etl-1", lease_seconds=60)
    assets = list(connector.assets.order_by("id"))
    assert batch["status"] == "running"
    assert batch["attempt"] == 1
    assert batch["worker"] == "etl-1"
    assert [i["item"] for i in batch["items"]] == [a.location for a in assets[:2]]
    assert batch["range_start"] <= assets[0].id
    assert batch["range_end"] == assets[1].id
    assert batch["lease_expires_at"]
    # the next acquire takes the next range, not the same one
    second = _acquire(api, job, worker="etl-2")
    assert second["range_end"] == assets[2].id
    assert second["worker"] == "etl-2"


def test_acquire_with_nothing_waiting_is_a_204(role_users):
    _, job = make_inventory(weights=[40])
    api = token_client(role_users["operator"])
    _acquire(api, job)
    response = api.post(f"/api/v1/jobs/{job.name}/acquire/", {}, format="json")
    assert response.status_code == 204


def test_acquire_defaults_the_worker_to_the_user(role_users):
    _, job = make_inventory()
    batch = _acquire(token_client(role_users["operator"]), job)
    assert batch["worker"] == "api:operator-user"


def test_acquire_on_a_paused_job_is_a_409(role_users):
    _, job = make_inventory(paused=True)
    response = token_client(role_users["operator"]).post(f"/api/v1/jobs/{job.name}/acquire/")
    assert response.status_code == 409
    assert "paused" in response.json()["detail"]


def test_heartbeat_then_succeed_commits_and_moves_the_watermark(role_users):
    _, job = make_inventory(weights=[40, 40, 40])
    api = token_client(role_users["operator"])
    batch = _acquire(api, job, lease_seconds=30)
    beat = api.post(
        f"/api/v1/batches/{batch['id']}/heartbeat/",
        {"attempt": 1, "lease_seconds": 600},
        format="json",
    )
    assert beat.status_code == 200, beat.content
    assert Batch.objects.get(pk=batch["id"]).lease_expires_at > timezone.now() + timedelta(
        seconds=500
    )
    done = api.post(
        f"/api/v1/batches/{batch['id']}/succeed/",
        {"attempt": 1, "result": {"rows_out": 7}},
        format="json",
    )
    assert done.status_code == 200, done.content
    assert done.json()["status"] == "succeeded"
    assert done.json()["result"] == {"rows_out": 7}
    assert Watermark.objects.get(job=job).value == batch["range_end"]


def test_succeeding_a_batch_whose_lease_was_taken_over_is_a_409(role_users):
    _, job = make_inventory(retry_backoff_seconds=0)
    api = token_client(role_users["operator"])
    first = _acquire(api, job, worker="slow")
    # the slow worker's lease runs out; the reaper hands the batch to another worker
    Batch.objects.filter(pk=first["id"]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    lifecycle.batches_reap_expired()
    second = _acquire(api, job, worker="fast")
    assert (second["id"], second["attempt"]) == (first["id"], 2)

    late = api.post(f"/api/v1/batches/{first['id']}/succeed/", {"attempt": 1}, format="json")
    assert late.status_code == 409
    assert "attempt" in late.json()["detail"]
    beat = api.post(f"/api/v1/batches/{first['id']}/heartbeat/", {"attempt": 1}, format="json")
    assert beat.status_code == 409
    # the reason, as a late report gets it: the batch runs again under attempt 2
    assert beat.json()["detail"] == f"batch {first['id']} is on attempt 2; attempt 1 may not report"
    assert Watermark.objects.get(job=job).value is None
    ok = api.post(f"/api/v1/batches/{first['id']}/succeed/", {"attempt": 2}, format="json")
    assert ok.status_code == 200


def test_fail_records_the_error_and_schedules_a_retry(role_users):
    _, job = make_inventory(max_attempts=2)
    api = token_client(role_users["operator"])
    batch = _acquire(api, job)
    response = api.post(
        f"/api/v1/batches/{batch['id']}/fail/",
        {"attempt": 1, "error": {"type": "ValueError", "message": "bad row 7"}},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "failed"
    assert body["error"]["message"] == "bad row 7"
    assert body["attempts"][0]["outcome"] == "failed"


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        ("succeed", {}, "attempt"),
        ("succeed", {"attempt": "one"}, "attempt"),
        ("succeed", {"attempt": 1, "result": [1, 2]}, "result"),
        ("fail", {"attempt": 1}, "error"),
        ("heartbeat", {"attempt": 1, "lease_seconds": 0}, "lease_seconds"),
        ("skip", {"reason": ""}, "reason"),
    ],
)
def test_bad_report_bodies_are_a_400_naming_the_field(role_users, action, body, field):
    _, job = make_inventory()
    api = token_client(role_users["admin"])
    batch = _acquire(api, job)
    response = api.post(f"/api/v1/batches/{batch['id']}/{action}/", body, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()


def test_a_datetime_watermark_value_of_the_wrong_shape_is_a_400(role_users):
    _, job = make_inventory(watermark_type="datetime")
    api = token_client(role_users["operator"])
    batch = _acquire(api, job)
    response = api.post(
        f"/api/v1/batches/{batch['id']}/succeed/",
        {"attempt": 1, "watermark_value": "2024-05-01 10:00"},  # no time zone
        format="json",
    )
    assert response.status_code == 400
    assert "watermark_value" in response.json()
    assert Batch.objects.get(pk=batch["id"]).status == BatchStatus.RUNNING


def test_unknown_batch_ids_are_404(role_users):
    api = token_client(role_users["admin"])
    assert api.get("/api/v1/batches/999999/").status_code == 404
    assert api.get(f"/api/v1/batches/{2**70}/").status_code == 404
    response = api.post("/api/v1/batches/999999/succeed/", {"attempt": 1}, format="json")
    assert response.status_code == 404


def test_retry_cancel_and_skip(role_users):
    _, job = make_inventory(weights=[40] * 6, max_attempts=1)
    operator = token_client(role_users["operator"])
    admin = token_client(role_users["admin"])
    dead = _acquire(operator, job)
    operator.post(
        f"/api/v1/batches/{dead['id']}/fail/",
        {"attempt": 1, "error": {"message": "x"}},
        format="json",
    )
    assert Batch.objects.get(pk=dead["id"]).status == BatchStatus.DEAD

    assert operator.post(f"/api/v1/batches/{dead['id']}/retry/").json()["status"] == "queued"
    # a queued batch cannot be skipped or retried
    skip = admin.post(f"/api/v1/batches/{dead['id']}/skip/", {"reason": "x"}, format="json")
    assert skip.status_code == 409
    assert operator.post(f"/api/v1/batches/{dead['id']}/retry/").status_code == 409

    again = _acquire(operator, job)
    assert again["id"] == dead["id"]
    operator.post(
        f"/api/v1/batches/{dead['id']}/fail/",
        {"attempt": again["attempt"], "error": {"message": "x"}},
        format="json",
    )
    skip = admin.post(
        f"/api/v1/batches/{dead['id']}/skip/", {"reason": "corrupt input file"}, format="json"
    )
    assert skip.status_code == 200, skip.content
    assert skip.json()["skip_reason"].endswith("corrupt input file")
    assert Watermark.objects.get(job=job).position == dead["range_end"] + 1

    running = _acquire(operator, job)
    cancel = operator.post(
        f"/api/v1/batches/{running['id']}/cancel/", {"reason": "wrong params"}, format="json"
    )
    assert cancel.status_code == 200
    assert cancel.json()["status"] == "cancelled"
    assert operator.post(f"/api/v1/batches/{running['id']}/cancel/").status_code == 409
    beat = operator.post(
        f"/api/v1/batches/{running['id']}/heartbeat/", {"attempt": 1}, format="json"
    )
    assert (beat.status_code, beat.json()["detail"]) == (
        409,
        f"batch {running['id']} is cancelled, not running",
    )


def test_batch_list_filters_and_pages_with_a_cursor(role_users):
    _, job = make_inventory(weights=[40] * 10)
    _, other = make_inventory(name="other", weights=[40] * 2)
    done = []
    for _ in range(3):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
        done.append(batch.pk)
    running = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_acquire(job=other, worker="w")
    api = session_client(role_users["viewer"])

    page = api.get("/api/v1/batches/", {"job": job.name, "status": "succeeded", "page_size": 2})
    body = page.json()
    assert [b["id"] for b in body["results"]] == sorted(done, reverse=True)[:2]
    rest = api.get(body["next"]).json()
    assert [b["id"] for b in rest["results"]] == [min(done)]
    assert rest["next"] is None

    both = api.get("/api/v1/batches/?status=succeeded&status=running&job=" + job.name).json()
    assert {b["id"] for b in both["results"]} == {*done, running.pk}
    assert api.get("/api/v1/batches/", {"kind": "backfill"}).json()["results"] == []

    soon = (timezone.now() + timedelta(hours=1)).isoformat()
    assert api.get("/api/v1/batches/", {"created_after": soon}).json()["results"] == []
    recent = api.get("/api/v1/batches/", {"finished_before": soon, "job": job.name}).json()
    assert len(recent["results"]) == 3

    bad = api.get("/api/v1/batches/", {"status": "exploded", "created_after": "last tuesday"})
    assert bad.status_code == 400
    assert {"status", "created_after"} <= set(bad.json())


def test_batch_detail_has_attempts_error_result_and_items(role_users):
    connector, job = make_inventory(weights=[40, 40])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={"bytes": 10})
    api = token_client(role_users["viewer"])
    body = api.get(f"/api/v1/batches/{batch.pk}/").json()
    assert body["result"] == {"bytes": 10}
    assert body["attempts"][0]["number"] == 1
    assert body["attempts"][0]["outcome"] == "succeeded"
    assert body["config_snapshot"]["processor"] == job.processor
    items = api.get(f"/api/v1/batches/{batch.pk}/items/").json()
    assert [i["item"] for i in items] == [a.location for a in connector.assets.order_by("id")]


@pytest.mark.parametrize("reason", ["clear \x1b[2J", "bell \x07", "x" * 2001])
def test_a_reason_with_a_control_character_or_too_long_is_a_400_naming_it(role_users, reason):
    """Reasons are shown in the CLI's tables and the gap report: no escape sequence gets there."""
    _, job = make_inventory(max_attempts=1)
    api = token_client(role_users["admin"])
    batch = _acquire(api, job)
    Batch.objects.filter(pk=batch["id"]).update(status=BatchStatus.DEAD)
    refused = api.post(f"/api/v1/batches/{batch['id']}/skip/", {"reason": reason}, format="json")
    assert refused.status_code == 400 and list(refused.json()) == ["reason"], refused.content
    assert Batch.objects.get(pk=batch["id"]).status == BatchStatus.DEAD


def test_a_heartbeat_never_shortens_a_lease_taken_for_longer_than_the_jobs(role_users):
    """acquire/ with a lease of 600 s on a job whose lease is 30 s: a heartbeat naming no length
    (or a shorter one) leaves it as it is; one naming a longer one extends it."""
    _, job = make_inventory(lease_seconds=30)
    api = token_client(role_users["operator"])
    batch = _acquire(api, job, lease_seconds=600)
    taken = Batch.objects.get(pk=batch["id"]).lease_expires_at
    url = f"/api/v1/batches/{batch['id']}/heartbeat/"
    for body in ({"attempt": 1}, {"attempt": 1, "lease_seconds": 5}):
        beat = api.post(url, body, format="json")
        assert beat.status_code == 200, beat.content
        assert Batch.objects.get(pk=batch["id"]).lease_expires_at == taken
    longer = api.post(url, {"attempt": 1, "lease_seconds": 3600}, format="json")
    assert longer.status_code == 200
    assert Batch.objects.get(pk=batch["id"]).lease_expires_at > taken + timedelta(seconds=2900)


@pytest.mark.django_db(transaction=True)
def test_the_python_clients_heartbeat_asks_again_for_the_lease_it_acquired_with(
    live_server, role_users
):
    from rest_framework.authtoken.models import Token

    from tidemark_client import Tidemark

    _, job = make_inventory(lease_seconds=2)
    token = Token.objects.create(user=role_users["operator"])
    client = Tidemark(live_server.url, token=token.key, timeout=30)
    batch = client.acquire(job.name, worker="etl", lease_seconds=600)
    assert batch.lease_seconds == 600
    Batch.objects.filter(pk=batch.id).update(  # most of the first lease gone
        lease_expires_at=timezone.now() + timedelta(seconds=60)
    )
    client.heartbeat(batch)
    assert Batch.objects.get(pk=batch.id).lease_expires_at > timezone.now() + timedelta(seconds=500)
