"""A request body's unknown keys are a 400 naming each, and nothing changes (inventory/api/
serializers/strict.py): DRF drops them without a word, so a misspelt setting silently kept its
old value or the default."""

import pytest
from django.conf import settings

from inventory.models import Backfill, Batch, Connector, Job
from inventory.services import lifecycle
from tests.support.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(role_users):
    return token_client(role_users["admin"])


def _refused(response, *names):
    assert response.status_code == 400, response.content
    body = response.json()
    assert sorted(body) == sorted(names)
    for name in names:
        assert body[name][0].startswith("unknown field; this call accepts ")


def test_a_misspelt_job_setting_is_refused_and_the_job_keeps_its_own(admin):
    _, job = make_inventory(batch_weight=100)
    response = admin.patch(f"/api/v1/jobs/{job.name}/", {"batch_weigth": 5}, format="json")
    _refused(response, "batch_weigth")
    assert "batch_weight" in response.json()["batch_weigth"][0]
    job.refresh_from_db()
    assert job.batch_weight == 100
    # the right name still works
    fixed = admin.patch(f"/api/v1/jobs/{job.name}/", {"batch_weight": 5}, format="json")
    assert fixed.status_code == 200, fixed.content
    job.refresh_from_db()
    assert job.batch_weight == 5


def test_a_new_job_or_connector_with_an_unknown_key_is_not_created(admin):
    connector, _ = make_inventory()
    body = {
        "name": "typo-job",
        "connector": connector.name,
        "batch_weight": 100,
        "processor": "passthrough",
        "sql": "SELECT 1",  # not a job setting: a processor's params carry its SQL
        "sink": {"kind": "files", "path": str(settings.DATA_DIR / "out")},
    }
    _refused(admin.post("/api/v1/jobs/", body, format="json"), "sql")
    assert not Job.objects.filter(name="typo-job").exists()
    landing = str(settings.DATA_DIR / "in")
    body = {"name": "typo-c", "kind": "files", "config": {"path": landing}, "lables": ["a"]}
    _refused(admin.post("/api/v1/connectors/", body, format="json"), "lables")
    assert not Connector.objects.filter(name="typo-c").exists()


def test_a_backfill_asked_with_a_misspelt_priority_does_not_start(admin):
    _, job = make_inventory()
    body = {"job": job.name, "range_start": 1, "range_end": 2, "priorty": 5, "resaon": "x"}
    _refused(admin.post("/api/v1/backfills/", body, format="json"), "priorty", "resaon")
    assert not Backfill.objects.exists()


def test_a_batch_call_with_an_unknown_key_changes_nothing(admin):
    _, job = make_inventory()
    batch = lifecycle.batch_acquire(job=job, worker="w")
    body = {"attempt": batch.attempt, "results": {"rows": 3}}
    _refused(admin.post(f"/api/v1/batches/{batch.pk}/succeed/", body, format="json"), "results")
    assert Batch.objects.get(pk=batch.pk).status == "running"


def test_a_call_that_takes_no_body_refuses_one_and_changes_nothing(admin):
    """`retry/` with `{"max_attempts": 5}`, `pause/` with `{"reason": ...}`: the keys were dropped
    and the call done as if they had been read."""
    connector, job = make_inventory()
    batch = lifecycle.batch_acquire(job=job, worker="w")
    Batch.objects.filter(pk=batch.pk).update(status="dead")
    calls = [
        (f"/api/v1/batches/{batch.pk}/retry/", {"max_attempts": 5}, "max_attempts"),
        (f"/api/v1/jobs/{job.name}/pause/", {"reason": "night"}, "reason"),
        (f"/api/v1/jobs/{job.name}/run/", {"backfill": True}, "backfill"),
        (f"/api/v1/connectors/{connector.name}/pause/", {"reason": "night"}, "reason"),
    ]
    for url, body, key in calls:
        _refused(admin.post(url, body, format="json"), key)
    assert Batch.objects.get(pk=batch.pk).status == "dead"
    assert not Job.objects.get(pk=job.pk).paused
    assert Connector.objects.get(pk=connector.pk).state == "active"
    assert admin.post(f"/api/v1/jobs/{job.name}/pause/", {}, format="json").status_code == 200
    assert admin.post(f"/api/v1/jobs/{job.name}/resume/").status_code == 200


@pytest.mark.parametrize(
    ("sink", "key"),
    [
        ({"kind": "files", "path": "OUT", "partiton_by": ["day"]}, "partiton_by"),
        ({"kind": "postgres", "table": "t", "dsn_env": "X", "mode": "append", "keys": []}, "keys"),
        ({"kind": "delta", "path": "OUT", "format": "parquet"}, "format"),
    ],
)
def test_a_sink_key_its_kind_does_not_read_is_refused_naming_it(admin, sink, key):
    connector, _ = make_inventory()
    out = str(settings.DATA_DIR / "out")
    sink = {k: (out if v == "OUT" else v) for k, v in sink.items()}
    body = {"name": "sinky", "connector": connector.name, "batch_weight": 100, "sink": sink}
    response = admin.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == [f"sink.{key}"]
    assert f"is not a {sink['kind']} sink setting" in response.json()[f"sink.{key}"][0]
    assert not Job.objects.filter(name="sinky").exists()


@pytest.mark.parametrize("kind", [["files"], {"a": 1}, 7, None])
def test_a_sink_kind_that_is_not_a_name_is_a_400(admin, kind):
    connector, _ = make_inventory()
    body = {"name": "sinky", "connector": connector.name, "batch_weight": 100}
    body["sink"] = {"kind": kind, "path": str(settings.DATA_DIR / "out")}
    response = admin.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert "unknown sink kind" in response.json()["sink"][0]


@pytest.mark.parametrize("encoding", ["multipart", "form"])
def test_a_body_that_is_not_json_is_a_415_and_changes_nothing(admin, encoding):
    """Issue 42: form-encoded and multipart bodies were parsed by form parsers that cannot carry
    a nested `config`, `params` or `sink`: those keys were silently dropped (a job created
    without its sink, a connector without its settings). The API now reads JSON only."""
    from urllib.parse import urlencode

    connector, job = make_inventory()
    body = {"name": "flat", "connector": connector.name, "batch_weight": "5", "sink": "x"}
    if encoding == "multipart":
        created = admin.post("/api/v1/jobs/", body, format="multipart")
        changed = admin.patch(
            f"/api/v1/jobs/{job.name}/", {"batch_weight": "7"}, format="multipart"
        )
    else:
        kind = "application/x-www-form-urlencoded"
        created = admin.post("/api/v1/jobs/", urlencode(body), content_type=kind)
        changed = admin.patch(
            f"/api/v1/jobs/{job.name}/", urlencode({"batch_weight": 7}), content_type=kind
        )
    for response in (created, changed):
        assert response.status_code == 415, response.content
        detail = response.json()["detail"]
        assert "JSON" in detail and "application/json" in detail
    assert not Job.objects.filter(name="flat").exists()
    job.refresh_from_db()
    assert job.batch_weight != 7
    # a connector's config likewise
    kind = "application/x-www-form-urlencoded"
    response = admin.post(
        "/api/v1/connectors/", urlencode({"name": "c", "kind": "files"}), content_type=kind
    )
    assert response.status_code == 415
    assert not Connector.objects.filter(name="c").exists()
    # the login call too (the CLI sends JSON)
    response = admin.post(
        "/api/v1/auth/token/", urlencode({"username": "u", "password": "p"}), content_type=kind
    )
    assert response.status_code == 415
