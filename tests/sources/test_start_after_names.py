"""A connector's start_after names another connector or label that exists, and keeps naming one:
a name that names nothing would keep the connector waiting for ever behind a generic message."""

import pytest
from django.core.cache import cache

from inventory.models import Connector, ConnectorState
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(role_users):
    return token_client(role_users["admin"])


def _create(api, tmp_path, name, **fields):
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    body = {"name": name, "kind": "files", "config": {"path": str(folder)}, **fields}
    return api.post("/api/v1/connectors/", body, format="json")


def test_a_start_after_naming_no_connector_or_label_is_a_400_naming_the_field(api, tmp_path):
    refused = _create(api, tmp_path, "live", start_after="histroy")
    assert refused.status_code == 400, refused.content
    assert list(refused.json()) == ["start_after"]
    assert "'histroy' names no connector" in refused.json()["start_after"][0]
    assert not Connector.objects.filter(name="live").exists()

    assert _create(api, tmp_path, "history", labels=["loads"]).status_code == 201
    assert _create(api, tmp_path, "by-name", start_after="history").status_code == 201
    assert _create(api, tmp_path, "by-label", start_after="loads").status_code == 201
    changed = api.patch("/api/v1/connectors/by-name/", {"start_after": "nothing"}, format="json")
    assert changed.status_code == 400 and list(changed.json()) == ["start_after"]
    assert Connector.objects.get(name="by-name").start_after == "history"


def test_removing_a_label_others_wait_for_is_a_409_naming_them(api, tmp_path):
    assert _create(api, tmp_path, "history", labels=["loads", "nightly"]).status_code == 201
    assert _create(api, tmp_path, "live", start_after="loads").status_code == 201

    removed = api.patch("/api/v1/connectors/history/", {"labels": ["nightly"]}, format="json")
    assert removed.status_code == 409, removed.content
    message = str(removed.json())
    assert "live" in message and "'loads'" in message
    assert Connector.objects.get(name="history").labels == ["loads", "nightly"]

    # another connector still answering to the label keeps `live` named: the removal is fine
    assert _create(api, tmp_path, "backup", labels=["loads"]).status_code == 201
    assert (
        api.patch("/api/v1/connectors/history/", {"labels": ["nightly"]}, format="json")
    ).status_code == 200
    # the label's last holder cannot drop it; once live waits for something else, it can
    assert api.patch("/api/v1/connectors/backup/", {"labels": []}, format="json").status_code == 409
    assert (
        api.patch("/api/v1/connectors/live/", {"start_after": "history"}, format="json")
    ).status_code == 200
    assert api.patch("/api/v1/connectors/backup/", {"labels": []}, format="json").status_code == 200


def test_deleting_a_connector_others_wait_for_is_a_409_naming_them(api, tmp_path):
    assert _create(api, tmp_path, "history", labels=["loads"]).status_code == 201
    assert _create(api, tmp_path, "live", start_after="history").status_code == 201
    assert _create(api, tmp_path, "audit", start_after="loads").status_code == 201

    refused = api.delete("/api/v1/connectors/history/")
    assert refused.status_code == 409, refused.content
    message = str(refused.json())
    assert "live (start_after 'history')" in message and "audit (start_after 'loads')" in message
    assert Connector.objects.filter(name="history").exists()

    for name in ("live", "audit"):
        assert (
            api.patch(f"/api/v1/connectors/{name}/", {"start_after": ""}, format="json")
        ).status_code == 200
    assert api.delete("/api/v1/connectors/history/").status_code == 204


def test_a_stored_start_after_naming_nothing_is_named_by_the_overview_alert(client, role_users):
    # stored before names were checked (or around the service): the alert says what is missing
    ConnectorFactory(name="orphan", state=ConnectorState.WAITING, start_after="gone-history")
    ConnectorFactory(name="history")
    ConnectorFactory(name="follower", state=ConnectorState.WAITING, start_after="history")
    cache.clear()
    client.force_login(role_users["viewer"])
    html = client.get("/").content.decode()
    assert "connector orphan waits for &#x27;gone-history&#x27;, which names no connector" in html
    assert "connector follower waits for history to complete" in html
    alerts = token_client(role_users["viewer"]).get("/api/v1/alerts/").json()["alerts"]
    messages = {a["message"] for a in alerts}
    assert any("'gone-history', which names no connector or label" in m for m in messages)


def test_the_demos_reset_deletes_the_follower_before_the_history_it_names(monkeypatch):
    # a second `make demo` on the same database deletes the demo's connectors: the live one's
    # start_after names the history, so the history can only go once the live one is gone
    from inventory.management.commands import _demo_history as demo
    from tests.support.sink_database import sink_database_dsn

    monkeypatch.setenv(demo.SINK_DSN_ENV, sink_database_dsn())
    ConnectorFactory(name=demo.HISTORY, state=ConnectorState.COMPLETED)
    ConnectorFactory(name=demo.LIVE, state=ConnectorState.ACTIVE, start_after=demo.HISTORY)
    demo.HistoryThenLive(command=None)._reset()
    assert not Connector.objects.filter(name__in=[demo.HISTORY, demo.LIVE]).exists()
