"""The admin as the operations tool: read-only system state, actions through the services,
watermark correction with reason and replay confirmation, each leaving a WatermarkEvent."""

import json

import pytest
from django.conf import settings
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from inventory.models import (
    Batch,
    BatchStatus,
    Connector,
    ConnectorState,
    Job,
    Watermark,
    WatermarkEvent,
)
from inventory.services import lifecycle
from tests.support.api_support import make_inventory

pytestmark = pytest.mark.django_db


def _committed_job(count=2):
    _, job = make_inventory(weights=[40] * 6)
    done = []
    for _ in range(count):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
        done.append(batch)
    return job, done


def _correct_url(job):
    return reverse("admin:inventory_watermark_correct", args=[job.watermark.pk])


def test_the_correction_page_shows_the_value_and_its_history(role_users, admin_client_for):
    job, done = _committed_job()
    page = admin_client_for(role_users["admin"]).get(_correct_url(job))
    assert page.status_code == 200
    html = page.content.decode()
    assert str(done[-1].last_item) in html
    assert html.count("<td>batch</td>") == 2
    assert 'name="replay"' in html


def test_a_correction_without_a_reason_is_refused_and_leaves_no_event(role_users, admin_client_for):
    job, done = _committed_job()
    events_before = WatermarkEvent.objects.count()
    response = admin_client_for(role_users["admin"]).post(
        _correct_url(job), {"value": str(done[-1].last_item + 1), "reason": ""}
    )
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert WatermarkEvent.objects.count() == events_before
    assert Watermark.objects.get(job=job).value == done[-1].last_item


def test_a_forward_correction_with_a_reason_records_an_admin_event(role_users, admin_client_for):
    job, done = _committed_job(count=1)
    ahead = job.connector.assets.order_by("id")[3].id
    response = admin_client_for(role_users["admin"]).post(
        _correct_url(job), {"value": str(ahead), "reason": "items 3-4 were loaded by hand"}
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    watermark = Watermark.objects.get(job=job)
    assert watermark.value == ahead
    event = WatermarkEvent.objects.filter(watermark=watermark).first()
    assert (event.source, event.actor, event.reason, event.is_replay) == (
        "admin",
        "admin-user",
        "items 3-4 were loaded by hand",
        False,
    )
    assert (event.old_value, event.new_value) == (done[0].last_item, ahead)


def test_a_decrease_without_replay_confirmation_is_refused(role_users, admin_client_for):
    job, done = _committed_job()
    events_before = WatermarkEvent.objects.count()
    response = admin_client_for(role_users["admin"]).post(
        _correct_url(job), {"value": str(done[0].last_item), "reason": "bad output"}
    )
    assert response.status_code == 200
    assert "replay" in response.content.decode()
    assert WatermarkEvent.objects.count() == events_before
    assert Watermark.objects.get(job=job).value == done[-1].last_item
    assert Batch.objects.get(pk=done[-1].pk).status == BatchStatus.SUCCEEDED


def test_a_decrease_with_replay_confirmation_is_recorded_as_a_replay(role_users, admin_client_for):
    job, done = _committed_job()
    response = admin_client_for(role_users["admin"]).post(
        _correct_url(job),
        {"value": str(done[0].last_item), "reason": "bad output", "replay": "on"},
    )
    assert response.status_code == 302
    assert Watermark.objects.get(job=job).value == done[0].last_item
    event = WatermarkEvent.objects.filter(watermark__job=job).first()
    assert (event.source, event.actor, event.is_replay, event.reason) == (
        "admin",
        "admin-user",
        True,
        "bad output",
    )
    assert Batch.objects.get(pk=done[-1].pk).status == BatchStatus.SUPERSEDED


def test_only_admins_may_open_the_correction_page(role_users, admin_client_for):
    job, _ = _committed_job(count=1)
    client = admin_client_for(role_users["operator"])
    assert client.get(_correct_url(job)).status_code == 403
    response = client.post(_correct_url(job), {"value": "0", "reason": "x", "replay": "on"})
    assert response.status_code == 403
    assert not WatermarkEvent.objects.filter(source="admin").exists()


def test_system_managed_fields_are_read_only(role_users, admin_client_for):
    job, done = _committed_job(count=1)
    client = admin_client_for(role_users["admin"])
    page = client.get(reverse("admin:inventory_batch_change", args=[done[0].pk]))
    assert page.status_code == 200
    assert 'name="status"' not in page.content.decode()
    response = client.post(
        reverse("admin:inventory_batch_change", args=[done[0].pk]), {"status": "queued"}
    )
    assert response.status_code == 403
    assert Batch.objects.get(pk=done[0].pk).status == BatchStatus.SUCCEEDED
    event = WatermarkEvent.objects.filter(watermark__job=job).first()
    assert (
        client.post(reverse("admin:inventory_watermarkevent_delete", args=[event.pk])).status_code
        == 403
    )
    assert client.get(reverse("admin:inventory_batch_add")).status_code == 403


@pytest.mark.parametrize(
    "model",
    [
        "connector",
        "asset",
        "job",
        "batch",
        "batchattempt",
        "backfill",
        "watermark",
        "watermarkevent",
    ],
)
def test_every_model_has_a_changelist(role_users, admin_client_for, model):
    _committed_job(count=1)
    response = admin_client_for(role_users["viewer"]).get(
        reverse(f"admin:inventory_{model}_changelist")
    )
    assert response.status_code == 200


def test_connector_pause_and_resume_actions_go_through_the_service(role_users, admin_client_for):
    job, _ = _committed_job(count=1)
    connector = job.connector
    finished = make_inventory(name="old")[0]
    Connector.objects.filter(pk=finished.pk).update(state=ConnectorState.COMPLETED)
    client = admin_client_for(role_users["operator"])
    url = reverse("admin:inventory_connector_changelist")
    response = client.post(
        url,
        {"action": "pause_connectors", ACTION_CHECKBOX_NAME: [connector.pk, finished.pk]},
        follow=True,
    )
    messages = [str(m) for m in response.context["messages"]]
    assert any("paused" in m and connector.name in m for m in messages)
    assert any("completed" in m for m in messages), messages  # the service refused that one
    assert Connector.objects.get(pk=connector.pk).state == ConnectorState.PAUSED
    assert Connector.objects.get(pk=finished.pk).state == ConnectorState.COMPLETED
    client.post(url, {"action": "resume_connectors", ACTION_CHECKBOX_NAME: [connector.pk]})
    assert Connector.objects.get(pk=connector.pk).state == ConnectorState.ACTIVE
    # both changes are recorded with the operator, and the connector's page lists them
    page = client.get(reverse("admin:inventory_connector_change", args=[connector.pk]))
    text = page.content.decode()
    assert page.status_code == 200
    assert text.count(role_users["operator"].username) >= 2 and "paused" in text


def test_a_viewer_gets_no_actions(role_users, admin_client_for):
    job, _ = _committed_job(count=1)
    client = admin_client_for(role_users["viewer"])
    url = reverse("admin:inventory_connector_changelist")
    client.post(url, {"action": "pause_connectors", ACTION_CHECKBOX_NAME: [job.connector.pk]})
    assert Connector.objects.get(pk=job.connector.pk).state == ConnectorState.ACTIVE


def _dead_batch():
    _, job = make_inventory(max_attempts=1)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=batch.pk, attempt=batch.attempt, error={"message": "x"})
    return batch


def test_skip_action_needs_a_reason_in_an_intermediate_form(role_users, admin_client_for):
    dead = _dead_batch()
    client = admin_client_for(role_users["admin"])
    url = reverse("admin:inventory_batch_changelist")
    form = client.post(url, {"action": "skip_batches", ACTION_CHECKBOX_NAME: [dead.pk]})
    assert form.status_code == 200
    assert 'name="reason"' in form.content.decode()
    assert Batch.objects.get(pk=dead.pk).status == BatchStatus.DEAD

    no_reason = client.post(
        url, {"action": "skip_batches", ACTION_CHECKBOX_NAME: [dead.pk], "apply": "1", "reason": ""}
    )
    assert no_reason.status_code == 200
    assert Batch.objects.get(pk=dead.pk).status == BatchStatus.DEAD

    client.post(
        url,
        {
            "action": "skip_batches",
            ACTION_CHECKBOX_NAME: [dead.pk],
            "apply": "1",
            "reason": "source file corrupt",
        },
    )
    skipped = Batch.objects.get(pk=dead.pk)
    assert skipped.status == BatchStatus.SKIPPED
    assert skipped.skip_reason == "admin-user: source file corrupt"
    event = WatermarkEvent.objects.filter(watermark__job=skipped.job).first()
    assert event.new_position == skipped.span.upper


def test_operators_cannot_skip_but_can_retry_and_cancel(role_users, admin_client_for):
    dead = _dead_batch()
    client = admin_client_for(role_users["operator"])
    url = reverse("admin:inventory_batch_changelist")
    client.post(
        url,
        {"action": "skip_batches", ACTION_CHECKBOX_NAME: [dead.pk], "apply": "1", "reason": "r"},
    )
    assert Batch.objects.get(pk=dead.pk).status == BatchStatus.DEAD
    client.post(url, {"action": "retry_batches", ACTION_CHECKBOX_NAME: [dead.pk]})
    assert Batch.objects.get(pk=dead.pk).status == BatchStatus.QUEUED
    client.post(url, {"action": "cancel_batches", ACTION_CHECKBOX_NAME: [dead.pk]})
    assert Batch.objects.get(pk=dead.pk).status == BatchStatus.CANCELLED


def test_a_job_saved_in_the_admin_goes_through_the_service(role_users, admin_client_for):
    connector, _ = make_inventory()
    client = admin_client_for(role_users["admin"])
    data = {
        "name": "from-admin",
        "connector": connector.pk,
        "watermark_type": "int",
        "start_position": 0,
        "processor": "passthrough",
        "params": "{}",
        "sink": '{"path": "/out", "password": "x"}',
        "batch_weight": 100,
        "max_items": 10,
        "max_attempts": 3,
        "retry_backoff_seconds": 30,
        "lease_seconds": 120,
        "schedule_cron": "",
        "max_concurrency": 1,
        "executor": "warm",
        "lookback": 0,
    }
    refused = client.post(reverse("admin:inventory_job_add"), data)
    assert refused.status_code == 200
    assert "secrets are not stored" in refused.content.decode()
    assert not Job.objects.filter(name="from-admin").exists()

    data["sink"] = '{"path": "/out"}'
    no_kind = client.post(reverse("admin:inventory_job_add"), data)
    assert "unknown sink kind" in no_kind.content.decode()  # checked when the job is saved
    assert not Job.objects.filter(name="from-admin").exists()

    data["sink"] = '{"kind": "files", "path": "/out"}'
    outside = client.post(reverse("admin:inventory_job_add"), data)
    assert "TIDEMARK_ALLOWED_ROOTS" in outside.content.decode()  # not under the allowed roots
    assert not Job.objects.filter(name="from-admin").exists()

    data["sink"] = json.dumps({"kind": "files", "path": str(settings.DATA_DIR / "out")})
    created = client.post(reverse("admin:inventory_job_add"), data)
    assert created.status_code == 302, created.content.decode()[-3000:]
    job = Job.objects.get(name="from-admin")
    assert Watermark.objects.filter(job=job).exists()  # job_create made it


def test_deleting_a_job_with_a_running_batch_is_refused_in_the_admin(role_users, admin_client_for):
    _, job = make_inventory()
    running = lifecycle.batch_acquire(job=job, worker="w")
    client = admin_client_for(role_users["admin"])
    assert client.get(reverse("admin:inventory_job_delete", args=[job.pk])).status_code == 403
    response = client.post(
        reverse("admin:inventory_job_changelist"),
        {"action": "delete_selected", ACTION_CHECKBOX_NAME: [job.pk], "post": "yes"},
    )
    assert response.status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()
    lifecycle.batch_cancel(batch_id=running.pk, actor="t")
    client.post(
        reverse("admin:inventory_job_changelist"),
        {"action": "delete_selected", ACTION_CHECKBOX_NAME: [job.pk], "post": "yes"},
    )
    assert not Job.objects.filter(pk=job.pk).exists()


def test_a_batch_page_shows_worker_output_with_credentials_masked(role_users, admin_client_for):
    _, job = make_inventory(weights=[40] * 2)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    leaked = {
        "message": "connect failed: host=db password=hunter2",
        "dsn": "postgres://u:hunter2@db/x",
    }
    # stored as an older version might have stored it, past today's scrubbing
    Batch.objects.filter(pk=batch.pk).update(error=leaked, result={"note": "password=hunter2"})
    batch.attempts.update(error=leaked)

    page = admin_client_for(role_users["viewer"]).get(
        reverse("admin:inventory_batch_change", args=[batch.pk])
    )
    assert page.status_code == 200
    body = page.content.decode()
    assert "hunter2" not in body
    assert "connect failed" in body  # the error itself is still readable
