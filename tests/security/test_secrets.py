"""Secrets in any form are refused or masked everywhere (invariant 10).

Refused on the way in, naming the field: key/value DSNs, JDBC URLs and query strings with a
password, URL passwords, secret-named keys at any depth, in connector configs, job params and sinks.
Masked on the way out: a secret stored around the services never reaches a viewer.
A canary secret held in the environment variables a connector and a job name never appears in an
API response, a page, the admin, a stored error, a Celery task's arguments or a log line.
"""

import logging

import pytest
from django.test import Client

from inventory.models import Batch, BatchAttempt, BatchStatus, Connector, Job
from inventory.services import dispatch, secrets
from inventory.services.assets import assets_register
from inventory.services.secrets import mask, secret_in_text
from tests.support.api_support import session_client, token_client
from tests.support.factories import ConnectorFactory, make_job
from workers import execution

pytestmark = pytest.mark.django_db

CANARY = "canary-b7e1c94f"


@pytest.mark.parametrize(
    "text",
    [
        "host=db.internal port=5432 password=hunter2 dbname=app",
        "host=db password = 'with spaces'",
        "dbname=app sslpassword=hunter2",
        "jdbc:postgresql://db/app?user=app&password=hunter2",
        "jdbc:sqlserver://db:1433;databaseName=app;user=app;Password=hunter2;",
        "postgresql://app:hunter2@db/app",
        "Server=db;Uid=app;Pwd=hunter2;",
        "https://api.example.com/v1?api_key=hunter2",
    ],
)
def test_credentials_are_found_in_every_spelling_and_masked(text):
    assert secret_in_text(text)
    assert "hunter2" not in mask({"a": [text]})["a"][0]


@pytest.mark.parametrize(
    "text",
    ["host=db port=5432 dbname=app user=app", "s3://bucket/prefix/", "/data/in", "password_env=X"],
)
def test_values_without_a_credential_pass(text):
    assert secret_in_text(text) is None
    assert mask(text) == text


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"dsn": "host=db user=app password=hunter2"}, "config.dsn"),
        ({"jdbc": "jdbc:postgresql://db/app?user=a&password=hunter2"}, "config.jdbc"),
        ({"options": {"deep": ["ok", "sslpassword='hunter2'"]}}, "config.options.deep[1]"),
        ({"options": {"PGPASSWORD": "hunter2"}}, "config.options.PGPASSWORD"),
    ],
)
def test_a_connector_config_holding_a_secret_is_refused(role_users, tmp_path, config, field):
    response = token_client(role_users["admin"]).post(
        "/api/v1/connectors/",
        {"name": "leaky", "kind": "files", "config": {"path": str(tmp_path), **config}},
        format="json",
    )
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert "hunter2" not in response.content.decode()
    assert not Connector.objects.filter(name="leaky").exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (
            {
                "sink": {
                    "kind": "postgres",
                    "dsn": "host=db.internal password=hunter2",
                    "table": "public.out",
                    "key": ["id"],
                }
            },
            "sink.dsn",
        ),
        ({"params": {"conn": "Server=db;Password=hunter2;"}}, "params.conn"),
        ({"params": {"url": "jdbc:mysql://db/app?password=hunter2"}}, "params.url"),
    ],
)
def test_a_job_holding_a_secret_is_refused(role_users, payload, field):
    connector = ConnectorFactory()
    response = token_client(role_users["admin"]).post(
        "/api/v1/jobs/",
        {"name": "leaky", "connector": connector.name, "batch_weight": 10, **payload},
        format="json",
    )
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert "hunter2" not in response.content.decode()
    assert not Job.objects.filter(name="leaky").exists()


def test_a_key_value_dsn_stored_before_the_rule_is_masked_for_viewers(role_users):
    """Issue 9, item 2: a job whose sink holds `host=... password=...` (written around the
    services, as an old row) never shows the password."""
    job = make_job(name="old-sink")
    Job.objects.filter(pk=job.pk).update(
        sink={"kind": "postgres", "dsn": "host=db password=hunter2", "table": "public.t"}
    )
    api = token_client(role_users["viewer"])
    for url in ("/api/v1/jobs/", f"/api/v1/jobs/{job.name}/"):
        response = api.get(url)
        assert response.status_code == 200
        assert "hunter2" not in response.content.decode()


# ---- the canary --------------------------------------------------------------------------------


@pytest.fixture
def canary_env(monkeypatch):
    monkeypatch.setenv(
        "TM_CANARY_DSN", f"host=127.0.0.1 port=1 dbname=out user=writer password={CANARY}"
    )
    monkeypatch.setenv("TM_CANARY_TOKEN", f"{CANARY}-token")


class _NoHeartbeat:
    lost = None

    def __init__(self, **kwargs):
        pass

    def start(self):
        pass

    def stop(self):
        pass


def _everything_a_user_can_see(admin_user, viewer_user, job, batch) -> dict[str, str]:
    api = token_client(viewer_user)
    pages = session_client(viewer_user)
    admin = Client()
    admin.force_login(admin_user)
    seen = {}
    for url in (
        "/api/v1/connectors/",
        f"/api/v1/connectors/{job.connector.name}/",
        "/api/v1/jobs/",
        f"/api/v1/jobs/{job.name}/",
        f"/api/v1/jobs/{job.name}/watermark/",
        "/api/v1/batches/",
        f"/api/v1/batches/{batch.pk}/",
        f"/api/v1/batches/{batch.pk}/items/",
    ):
        seen[url] = api.get(url)
    for url in ("/", f"/jobs/{job.name}/", "/connectors/", f"/batches/{batch.pk}/", "/backfills/"):
        seen[url] = pages.get(url)
    for url in (
        f"/admin/inventory/connector/{job.connector.pk}/change/",
        f"/admin/inventory/job/{job.pk}/change/",
        f"/admin/inventory/batch/{batch.pk}/change/",
        "/admin/inventory/batch/",
        "/admin/inventory/batchattempt/",
    ):
        seen[url] = admin.get(url)
    for url, response in seen.items():
        assert response.status_code == 200, (url, response.status_code)
    return {url: response.content.decode() for url, response in seen.items()}


def test_a_canary_secret_never_leaves_its_environment_variable(
    role_users, canary_env, tmp_path, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    caplog.set_level(logging.DEBUG)
    sent = []
    from workers.tasks import run_job

    monkeypatch.setattr(
        run_job, "apply_async", lambda *args, **kwargs: sent.append(repr((args, kwargs)))
    )
    admin_api = token_client(role_users["admin"])
    created = admin_api.post(
        "/api/v1/connectors/",
        {
            "name": "canary",
            "kind": "files",
            # a local directory names no credential (an unknown key is refused): the sink's
            # dsn_env below is the name this test follows
            "config": {"path": str(tmp_path)},
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    created = admin_api.post(
        "/api/v1/jobs/",
        {
            "name": "canary-job",
            "connector": "canary",
            "batch_weight": 100,
            "max_attempts": 1,
            "sink": {
                "kind": "postgres",
                "dsn_env": "TM_CANARY_DSN",
                "table": "public.out",
                "key": ["id"],
            },
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    job = Job.objects.select_related("connector").get(name="canary-job")
    assets_register(connector=job.connector, items=[(str(tmp_path / "a.parquet"), 10, {})])

    with django_capture_on_commit_callbacks(execute=True):
        planned = dispatch.job_run(job=job)
    assert planned.planned and sent
    batch_id = planned.planned[0]

    def leaky_executor(_name):
        def run(spec, _cancel):
            import os

            # a driver error that echoes its whole DSN, as some do
            raise RuntimeError(f"could not connect with {os.environ['TM_CANARY_DSN']!r}")

        return run

    # the heartbeat thread would use a connection of its own, outside this test's transaction
    monkeypatch.setattr(execution, "Heartbeat", _NoHeartbeat)
    outcome = execution.batch_execute(batch_id=batch_id, executor_for=leaky_executor, worker="w:1")
    assert outcome.status == BatchStatus.DEAD

    batch = Batch.objects.get(pk=batch_id)
    stored = repr(batch.error) + repr(list(BatchAttempt.objects.values_list("error", flat=True)))
    assert "could not connect" in stored
    assert CANARY not in stored

    seen = _everything_a_user_can_see(role_users["admin"], role_users["viewer"], job, batch)
    for url, body in seen.items():
        assert CANARY not in body, url
    assert "TM_CANARY_DSN" in seen[f"/api/v1/jobs/{job.name}/"]  # the name is shown, not the value
    for message in sent:
        assert CANARY not in message
    assert CANARY not in caplog.text


def test_an_error_reported_through_the_api_is_stored_without_the_secret(
    role_users, canary_env, tmp_path
):
    connector = ConnectorFactory(config={"path": str(tmp_path), "token_env": "TM_CANARY_TOKEN"})
    assets_register(connector=connector, items=[(str(tmp_path / "a.csv"), 1, {})])
    job = make_job(connector=connector, name="ext")
    api = token_client(role_users["operator"])
    taken = api.post(f"/api/v1/jobs/{job.name}/acquire/", {}, format="json").json()
    response = api.post(
        f"/api/v1/batches/{taken['id']}/fail/",
        {
            "attempt": taken["attempt"],
            "error": {
                "type": "AuthError",
                "message": f"token {CANARY}-token refused",
                "detail": {"dsn": f"host=x password={CANARY}"},
            },
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    assert CANARY not in response.content.decode()
    stored = Batch.objects.get(pk=taken["id"]).error
    assert "refused" in stored["message"]
    assert CANARY not in repr(stored)


def test_a_result_is_scrubbed_of_configured_credentials_at_any_depth(monkeypatch, settings):
    settings.TIDEMARK_CREDENTIALS = ["TM_TEST_SCRUB_*"]
    monkeypatch.setenv("TM_TEST_SCRUB_TOKEN", CANARY)
    result = {"rows": 3, "notes": [{"said": f"token {CANARY} rejected"}], "ok": True}
    assert secrets.scrub(result) == {
        "rows": 3,
        "notes": [{"said": f"token {secrets.MASK} rejected"}],
        "ok": True,
    }


def test_a_value_holding_no_text_is_kept_without_reading_the_credentials(monkeypatch):
    def unread():
        raise AssertionError("the credentials were read for a value holding no text")

    monkeypatch.setattr(secrets, "configured_credentials", unread)
    value = [3, [1, 2.5, None], False]
    assert secrets.scrub(value) == value


def test_a_credential_used_as_a_key_is_masked_in_results_and_errors(monkeypatch, settings):
    """A result's or an error's keys are stored and shown as its values are."""
    settings.TIDEMARK_CREDENTIALS = ["TM_TEST_SCRUB_*"]
    monkeypatch.setenv("TM_TEST_SCRUB_TOKEN", CANARY)
    result = {CANARY: 1, "by host": {f"db password={CANARY}": 2}, "rows": 3}
    assert secrets.scrub(result) == {
        secrets.MASK: 1,
        "by host": {f"db password={secrets.MASK}": 2},
        "rows": 3,
    }
    assert CANARY not in repr(secrets.redact({"type": "x", f"env {CANARY}": "v"}))
