"""`?dry_run=true` on the writes of a pipelines file (inventory/api/views/base.py): the real call,
every check included, and nothing kept; what `tidemark plan` asks so that a plan says what the
server would refuse."""

import pytest
from django.conf import settings
from django_celery_beat.models import PeriodicTask
from rest_framework.test import APIClient

from inventory.models import Asset, Connector, Job, Watermark, WatermarkEvent
from inventory.services import lifecycle
from tests.support.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(role_users):
    return token_client(role_users["admin"])


def _job_body(connector, **overrides):
    return {
        "name": "dry-job",
        "connector": connector.name,
        "batch_weight": 100,
        "processor": "passthrough",
        "schedule_seconds": 60,
        "sink": {"kind": "files", "path": str(settings.DATA_DIR / "out")},
        **overrides,
    }


def test_a_dry_run_create_answers_what_would_be_saved_and_saves_nothing(admin):
    connector, _ = make_inventory()
    tasks = PeriodicTask.objects.count()
    response = admin.post("/api/v1/jobs/?dry_run=true", _job_body(connector), format="json")
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "dry-job"
    assert response.json()["batch_weight"] == 100
    assert not Job.objects.filter(name="dry-job").exists()
    assert PeriodicTask.objects.count() == tasks  # the schedule it would get is not kept either

    (settings.DATA_DIR / "in").mkdir(parents=True, exist_ok=True)
    landing = str(settings.DATA_DIR / "in")
    body = {"name": "dry-c", "kind": "files", "config": {"path": landing}}
    response = admin.post("/api/v1/connectors/?dry_run=true", body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["config"]["path"] == landing
    assert not Connector.objects.filter(name="dry-c").exists()

    # the same bodies without the dry run are saved
    assert admin.post("/api/v1/connectors/", body, format="json").status_code == 201
    assert admin.post("/api/v1/jobs/", _job_body(connector), format="json").status_code == 201


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/jobs/", {"sink": {"kind": "files", "path": "/tmp/x", "fromat": "csv"}}, "sink"),
        ("/api/v1/jobs/", {"processor": "no_such_processor"}, "processor"),
        ("/api/v1/connectors/", {"config": {"path": "/etc"}}, "config"),
    ],
)
def test_a_dry_run_refuses_what_the_call_refuses_naming_the_field(admin, path, body, field):
    connector, _ = make_inventory()
    if path.endswith("jobs/"):
        full = _job_body(connector, **body)
    else:
        full = {"name": "dry-c", "kind": "files", **body}
    dry = admin.post(path + "?dry_run=true", full, format="json")
    real = admin.post(path, full, format="json")
    assert dry.status_code == real.status_code == 400, dry.content
    assert dry.json() == real.json()
    assert any(key.startswith(field) for key in dry.json()), dry.json()


def test_a_dry_run_change_leaves_the_job_as_it_was(admin):
    _, job = make_inventory(batch_weight=100)
    response = admin.patch(
        f"/api/v1/jobs/{job.name}/?dry_run=1", {"batch_weight": 7}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["batch_weight"] == 7
    job.refresh_from_db()
    assert job.batch_weight == 100


def test_a_dry_run_reset_keeps_the_items_the_watermark_and_its_history(admin):
    connector, job = make_inventory()
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
    position = Watermark.objects.get(job=job).position
    events = WatermarkEvent.objects.count()
    assets = Asset.objects.filter(connector=connector).count()
    other = str(settings.DATA_DIR / "in" / "elsewhere")
    (settings.DATA_DIR / "in" / "elsewhere").mkdir(parents=True, exist_ok=True)
    response = admin.post(
        f"/api/v1/connectors/{connector.name}/reset/?dry_run=true",
        {"config": {"path": other}, "reason": "moved"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["config"]["path"] == other
    connector.refresh_from_db()
    assert connector.config["path"] != other
    assert Watermark.objects.get(job=job).position == position > 1
    assert WatermarkEvent.objects.count() == events
    assert Asset.objects.filter(connector=connector).count() == assets > 0


def test_a_dry_run_needs_the_role_of_the_call_and_a_true_or_false(role_users, admin):
    connector, _ = make_inventory()
    for role in ("viewer", "operator"):
        client = token_client(role_users[role])
        response = client.post("/api/v1/jobs/?dry_run=true", _job_body(connector), format="json")
        assert response.status_code == 403, (role, response.content)
    response = admin.post("/api/v1/jobs/?dry_run=maybe", _job_body(connector), format="json")
    assert response.status_code == 400
    assert "dry_run" in response.json()
    assert not Job.objects.filter(name="dry-job").exists()


def test_a_write_without_a_dry_run_refuses_the_parameter_instead_of_doing_it(admin):
    connector, job = make_inventory()
    paused = admin.post(f"/api/v1/jobs/{job.name}/pause/?dry_run=true")
    assert paused.status_code == 400
    assert "no dry run" in paused.json()["dry_run"][0]
    job.refresh_from_db()
    assert not job.paused
    holes = admin.post(f"/api/v1/jobs/{job.name}/gaps/backfill/?dry_run=true", {}, format="json")
    assert holes.status_code == 400 and "dry_run" in holes.json()


def test_a_deletes_dry_run_checks_it_and_deletes_nothing(admin):
    """`tidemark plan --prune` asks the server whether each deletion would go through."""
    connector, job = make_inventory()
    gone = admin.delete(f"/api/v1/jobs/{job.name}/?dry_run=true")
    assert gone.status_code == 204, gone.content
    assert Job.objects.filter(pk=job.pk).exists()
    # the connector still has its job: the dry run is refused as the delete would be
    refused = admin.delete(f"/api/v1/connectors/{connector.name}/?dry_run=1")
    assert refused.status_code == 409
    assert f"used by job(s) {job.name}" in refused.json()["detail"]
    assert Connector.objects.filter(pk=connector.pk).exists()
    assert admin.delete(f"/api/v1/jobs/{job.name}/?dry_run=maybe").status_code == 400
    assert Job.objects.filter(pk=job.pk).exists()
    # an anonymous caller is told to authenticate first, whatever it asks
    assert APIClient().delete(f"/api/v1/jobs/{job.name}/?dry_run=true").status_code == 401
