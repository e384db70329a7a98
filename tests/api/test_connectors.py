"""connectors/: CRUD by name, pause/resume, secrets never shown, errors that name the field."""

import json

import pytest

from inventory.models import Connector, ConnectorState
from tests.support.api_support import make_inventory, token_client
from tests.support.factories import ConnectorFactory

pytestmark = pytest.mark.django_db


def test_it_creates_a_connector_and_refuses_a_key_its_kind_does_not_read(role_users, tmp_path):
    """A local directory reads no credential: a `*_env` key there (or a misspelt setting such as
    `patern`) is refused naming it, not stored as a setting nothing reads."""
    api = token_client(role_users["admin"])
    for key in ("dsn_env", "password_env", "patern"):
        config = {"path": str(tmp_path), key: "WAREHOUSE_DSN"}
        body = {"name": "warehouse", "kind": "files", "config": config}
        response = api.post("/api/v1/connectors/", body, format="json")
        assert response.status_code == 400, response.content
        assert "is not a files (local directory) setting" in response.json()[f"config.{key}"][0]
    assert not Connector.objects.filter(name="warehouse").exists()
    config = {"path": str(tmp_path), "patterns": ["*.csv"], "settle_seconds": 0}
    response = api.post(
        "/api/v1/connectors/",
        {"name": "warehouse", "kind": "files", "config": config, "labels": ["nightly"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["config"] == config
    assert body["state"] == "active"
    assert Connector.objects.get(name="warehouse").labels == ["nightly"]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"path": "/x", "password": "hunter2"}, "config.password"),
        ({"path": "/x", "options": {"sasl": {"api_key": "abc"}}}, "config.options.sasl.api_key"),
        ({"path": "/x", "url": "postgres://app:hunter2@db/app"}, "config.url"),
        ({"path": "/x", "password_env": "not a name"}, "config.password_env"),
    ],
)
def test_it_refuses_secrets_in_a_config_naming_the_field(role_users, config, field):
    api = token_client(role_users["admin"])
    response = api.post(
        "/api/v1/connectors/", {"name": "leaky", "kind": "files", "config": config}, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()
    assert "hunter2" not in response.content.decode()
    assert not Connector.objects.filter(name="leaky").exists()


def test_a_secret_stored_before_validation_is_masked_on_the_way_out(role_users):
    connector, _job = make_inventory()
    # written around the service, as an old row or a manual SQL fix could have it
    Connector.objects.filter(pk=connector.pk).update(
        config={"path": "/data/in", "nested": {"Secret_Token": "s3cr3t-value"}}
    )
    api = token_client(role_users["viewer"])
    for url in ("/api/v1/connectors/", f"/api/v1/connectors/{connector.name}/"):
        response = api.get(url)
        assert response.status_code == 200
        assert "s3cr3t-value" not in response.content.decode()
    detail = api.get(f"/api/v1/connectors/{connector.name}/").json()
    assert detail["config"]["nested"]["Secret_Token"] == "********"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "no spaces allowed", "kind": "files", "config": {"path": "/x"}}, "name"),
        ({"name": "ok", "kind": "ftp", "config": {"path": "/x"}}, "kind"),
        ({"name": "ok", "kind": "files", "config": {}}, "config.path"),
        ({"name": "ok", "kind": "files", "config": ["not", "an", "object"]}, "config"),
        ({"name": "ok", "kind": "files", "config": {"path": "/x"}, "labels": "x"}, "labels"),
        ({"kind": "files", "config": {"path": "/x"}}, "name"),
    ],
)
def test_bad_connector_input_is_a_400_naming_the_field(role_users, payload, field):
    api = token_client(role_users["admin"])
    response = api.post("/api/v1/connectors/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()


@pytest.mark.parametrize(
    ("read", "field"),
    [
        ({"format": "xml"}, "config.format"),
        ({"format": "PARQUET"}, "config.format"),
        ({"schema": 5}, "config.schema"),
        ({"schema": "  "}, "config.schema"),
        ({"read_options": ["header"]}, "config.read_options"),
        ({"read_options": {"header": ["true"]}}, "config.read_options.header"),
        ({"lineage": "yes"}, "config.lineage"),
        ({"watermark_column": ""}, "config.watermark_column"),
        ({"watermark_column": ["t"]}, "config.watermark_column"),
    ],
)
def test_a_files_connectors_read_settings_are_checked_when_saved(role_users, tmp_path, read, field):
    """What the workers read (format, schema, reader options, lineage, watermark column) is
    refused naming it, not stored to fail (or be misread) in every batch later."""
    api = token_client(role_users["admin"])
    body = {"name": "reads", "kind": "files", "config": {"path": str(tmp_path), **read}}
    response = api.post("/api/v1/connectors/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Connector.objects.filter(name="reads").exists()
    good = {"format": "csv", "schema": "id INT", "read_options": {"header": False, "sep": ";"}}
    body["config"] = {"path": str(tmp_path), **good, "lineage": True, "watermark_column": "t"}
    assert api.post("/api/v1/connectors/", body, format="json").status_code == 201


def test_a_duplicate_name_is_refused(role_users):
    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    response = api.post(
        "/api/v1/connectors/",
        {"name": connector.name, "kind": "files", "config": {"path": "/x"}},
        format="json",
    )
    assert response.status_code == 400
    assert "name" in response.json()


def test_it_lists_and_reads_connectors_by_name(role_users):
    connector, job = make_inventory()
    api = token_client(role_users["viewer"])
    listing = api.get("/api/v1/connectors/", {"state": "active"}).json()
    assert [c["name"] for c in listing["results"]] == [connector.name]
    detail = api.get(f"/api/v1/connectors/{connector.name}/").json()
    assert detail["job_count"] == 1
    assert detail["jobs_url"].endswith(f"/api/v1/jobs/?connector__name={connector.name}")
    assert [j["name"] for j in api.get(detail["jobs_url"]).json()["results"]] == [job.name]
    assert api.get("/api/v1/connectors/nope/").status_code == 404
    assert "nope" in api.get("/api/v1/connectors/nope/").json()["detail"]


def test_it_updates_config_and_labels_but_not_the_kind(role_users, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "other").mkdir()
    connector = ConnectorFactory(config={"path": str(tmp_path / "in")})  # no jobs read it yet
    api = token_client(role_users["admin"])
    response = api.patch(
        f"/api/v1/connectors/{connector.name}/",
        {"config": {"path": str(tmp_path / "other")}, "labels": ["a", "b"]},
        format="json",
    )
    assert response.status_code == 200, response.content
    connector.refresh_from_db()
    assert connector.config == {"path": str(tmp_path / "other")}
    assert connector.labels == ["a", "b"]
    response = api.patch(
        f"/api/v1/connectors/{connector.name}/", {"config": {"token": "x"}}, format="json"
    )
    assert response.status_code == 400
    assert "config.token" in response.json()
    connector.refresh_from_db()
    assert connector.config == {"path": str(tmp_path / "other")}


def test_it_pauses_and_resumes_a_connector(role_users):
    connector, _ = make_inventory()
    api = token_client(role_users["operator"])
    response = api.post(f"/api/v1/connectors/{connector.name}/pause/")
    assert response.status_code == 200
    assert response.json()["state"] == "paused"
    response = api.post(f"/api/v1/connectors/{connector.name}/resume/")
    assert response.json()["state"] == "active"
    connector.refresh_from_db()
    assert connector.state == ConnectorState.ACTIVE


def test_resuming_a_completed_connector_is_a_409(role_users):
    connector, _ = make_inventory()
    Connector.objects.filter(pk=connector.pk).update(state=ConnectorState.COMPLETED)
    api = token_client(role_users["operator"])
    response = api.post(f"/api/v1/connectors/{connector.name}/resume/")
    assert response.status_code == 409
    assert "completed" in response.json()["detail"]
    assert api.post("/api/v1/connectors/missing/resume/").status_code == 404


def test_deleting_a_connector_in_use_is_a_409_and_unused_is_204(role_users, tmp_path):
    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    response = api.delete(f"/api/v1/connectors/{connector.name}/")
    assert response.status_code == 409
    assert Connector.objects.filter(pk=connector.pk).exists()
    api.post(
        "/api/v1/connectors/",
        json.dumps({"name": "spare", "kind": "files", "config": {"path": str(tmp_path)}}),
        content_type="application/json",
    )
    assert api.delete("/api/v1/connectors/spare/").status_code == 204
    assert not Connector.objects.filter(name="spare").exists()


@pytest.mark.parametrize(
    "kind, config, field",
    [
        ("kafka", {"topic": "orders"}, "config.bootstrap_servers"),
        # a table of another database needs the variable that holds its DSN
        ("table", {"table": "events"}, "config.dsn_env"),
    ],
)
def test_kinds_that_cannot_be_planned_yet_are_refused_not_accepted(role_users, kind, config, field):
    response = token_client(role_users["admin"]).post(
        "/api/v1/connectors/", {"name": f"c-{kind}", "kind": kind, "config": config}, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize("key", ["stable_probe_seconds", "recheck_per_scan", "patern"])
def test_an_object_store_config_refuses_a_key_it_does_not_read_before_reaching_the_store(
    role_users, key
):
    """Refused before any request to the store (no server listens on this endpoint)."""
    api = token_client(role_users["admin"])
    config = {"path": "s3://bucket/prefix/", "endpoint_url": "http://127.0.0.1:9", key: "SOME_NAME"}
    response = api.post(
        "/api/v1/connectors/", {"name": "store", "kind": "files", "config": config}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "is not a files (object store) setting" in response.json()[f"config.{key}"][0]


@pytest.mark.parametrize(
    ("change", "field", "shown"),
    [
        ({"labels": ["nightly", "red\x1b[31m"]}, "labels[1]", "U+001B"),
        ({"labels": ["line\u2028break"]}, "labels[0]", "U+2028"),
        # text that reorders what is shown after it (a label reading "gnp.exe" as "exe.png")
        ({"labels": ["ok", "rlo\u202egnp.exe"]}, "labels[1]", "U+202E"),
        ({"labels": ["zero\u200bwidth"]}, "labels[0]", "U+200B"),
        ({"start_after": "up\nstream"}, "start_after", "U+000A"),
        # refused by the serializer's own list check, named the same way
        ({"labels": ["nightly", ""]}, "labels[1]", "blank"),
        ({"labels": ["nightly", "x" * 101]}, "labels[1]", "100 characters"),
    ],
)
def test_control_characters_in_labels_or_start_after_are_a_400_naming_where(
    role_users, tmp_path, change, field, shown
):
    (tmp_path / "in").mkdir()
    api = token_client(role_users["admin"])
    config = {"path": str(tmp_path / "in")}
    created = api.post(
        "/api/v1/connectors/",
        {"name": "new", "kind": "files", "config": config, **change},
        format="json",
    )
    assert created.status_code == 400, created.content
    assert shown in created.json()[field][0], created.json()
    assert not Connector.objects.filter(name="new").exists()
    connector = ConnectorFactory(config=config, labels=["kept"])
    changed = api.patch(f"/api/v1/connectors/{connector.name}/", change, format="json")
    assert changed.status_code == 400, changed.content
    assert field in changed.json()
    connector.refresh_from_db()
    assert connector.labels == ["kept"] and connector.start_after == ""


def test_labels_in_scripts_that_join_letters_invisibly_are_kept(role_users, tmp_path):
    """The zero-width joiners are letters' business in Persian, Indic scripts and emoji: kept,
    where the characters that reorder or hide text are refused (above)."""
    (tmp_path / "in").mkdir()
    api = token_client(role_users["admin"])
    labels = ["\u0641\u0627\u06cc\u0644\u200c\u0647\u0627", "\U0001f468\u200d\U0001f469"]
    created = api.post(
        "/api/v1/connectors/",
        {
            "name": "scripts",
            "kind": "files",
            "config": {"path": str(tmp_path / "in")},
            "labels": labels,
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert Connector.objects.get(name="scripts").labels == labels
