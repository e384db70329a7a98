"""Orchestration: a snapshot connector completes once its jobs committed all of it, the connectors
that start after it go from waiting to active, and every state change is recorded and shown."""

import pytest

from inventory.models import ConnectorEvent, ConnectorState
from inventory.services import lifecycle, scheduling
from inventory.services.connectors import connector_create
from inventory.services.discovery import discover
from inventory.services.jobs import job_create
from tests.support.api_support import token_client
from tests.support.table_source import SOURCE_ENV, insert

pytestmark = pytest.mark.django_db(transaction=True)


def _commit_all(job) -> int:
    done = 0
    while (batch := lifecycle.batch_acquire(job=job, worker="t")) is not None:
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={})
        done += 1
    return done


def test_a_snapshot_completes_when_committed_and_releases_what_starts_after_it(
    source_dsn,
    tmp_path,
    role_users,
):
    insert(source_dsn, range(1, 21))
    history = connector_create(
        name="orders-history",
        kind="table",
        labels=["history"],
        config={
            "dsn_env": SOURCE_ENV,
            "table": "orders",
            "column": "id",
            "slice_rows": 5,
            "snapshot": True,
        },
    )
    (tmp_path / "live").mkdir()
    live = connector_create(
        name="orders-live",
        kind="files",
        config={"path": str(tmp_path / "live")},
        start_after="history",
    )
    assert live.state == ConnectorState.WAITING
    job = job_create(name="history-load", connector=history, batch_weight=10, max_items=10)

    assert discover(history) == 4
    insert(source_dsn, range(21, 31))  # after the snapshot was taken: never part of it
    assert discover(history) == 0
    assert history.cursor["snapshot_closed"] is True

    _commit_all(job)
    assert scheduling.connectors_orchestrate() == ["orders-live"]
    history.refresh_from_db()
    live.refresh_from_db()
    assert history.state == ConnectorState.COMPLETED
    assert live.state == ConnectorState.ACTIVE
    assert scheduling.connectors_orchestrate() == []  # nothing changes twice

    completed = ConnectorEvent.objects.get(connector=history)
    assert (completed.old_state, completed.new_state) == ("active", "completed")
    assert "snapshot completed" in completed.reason and completed.actor == "orchestration"
    released = ConnectorEvent.objects.get(connector=live)
    assert (released.old_state, released.new_state) == ("waiting", "active")

    api = token_client(role_users["viewer"])
    events = api.get("/api/v1/connectors/orders-live/events/").json()["results"]
    assert [(e["old_state"], e["new_state"]) for e in events] == [("waiting", "active")]
    shown = api.get("/api/v1/connectors/orders-history/").json()
    assert shown["state"] == "completed" and shown["cursor"]["snapshot_closed"] is True


def test_a_snapshot_is_not_completed_while_a_job_has_not_committed_all_of_it(
    source_dsn,
):
    insert(source_dsn, range(1, 11))
    history = connector_create(
        name="partial-history",
        kind="table",
        config={
            "dsn_env": SOURCE_ENV,
            "table": "orders",
            "column": "id",
            "slice_rows": 5,
            "snapshot": True,
        },
    )
    fast = job_create(name="fast", connector=history, batch_weight=100, max_items=10)
    slow = job_create(name="slow", connector=history, batch_weight=5, max_items=1)
    discover(history)
    _commit_all(fast)
    first = lifecycle.batch_acquire(job=slow, worker="t")
    lifecycle.batch_succeed(batch_id=first.pk, attempt=first.attempt, result={})
    scheduling.connectors_orchestrate()
    history.refresh_from_db()
    assert history.state == ConnectorState.ACTIVE  # slow has one slice to go
    _commit_all(slow)
    scheduling.connectors_orchestrate()
    history.refresh_from_db()
    assert history.state == ConnectorState.COMPLETED


def test_pause_and_resume_are_recorded_with_the_actor(tmp_path, role_users):
    (tmp_path / "in").mkdir()
    connector_create(name="landing", kind="files", config={"path": str(tmp_path / "in")})
    api = token_client(role_users["operator"])
    assert api.post("/api/v1/connectors/landing/pause/").status_code == 200
    assert api.post("/api/v1/connectors/landing/resume/").status_code == 200
    events = token_client(role_users["viewer"]).get("/api/v1/connectors/landing/events/").json()
    assert [(e["new_state"], e["actor"]) for e in events["results"]] == [
        ("active", role_users["operator"].username),
        ("paused", role_users["operator"].username),
    ]


def test_a_files_snapshot_is_the_files_of_its_first_look(tmp_path):
    landing = tmp_path / "history"
    landing.mkdir()
    for n in range(2):
        (landing / f"{n}.json").write_text("{}\n")
    connector = connector_create(
        name="files-history",
        kind="files",
        config={"path": str(landing), "snapshot": True, "settle_seconds": 0},
    )
    job = job_create(name="files-history-load", connector=connector, batch_weight=10**6)
    assert discover(connector) == 2
    (landing / "late.json").write_text("{}\n")
    assert discover(connector) == 0  # not part of the snapshot
    _commit_all(job)
    scheduling.connectors_orchestrate()
    connector.refresh_from_db()
    assert connector.state == ConnectorState.COMPLETED


def test_the_connectors_page_shows_the_last_state_change_and_the_cursor(
    source_dsn,
    role_users,
):
    from django.test import Client

    insert(source_dsn, range(1, 6))
    connector = connector_create(
        name="shown-orders",
        kind="table",
        config={"dsn_env": SOURCE_ENV, "table": "orders", "column": "id"},
    )
    discover(connector)
    api = token_client(role_users["operator"])
    assert api.post("/api/v1/connectors/shown-orders/pause/").status_code == 200
    client = Client()
    client.force_login(role_users["viewer"])
    page = client.get("/connectors/").content.decode()
    row = page.split('id="connector-shown-orders"', 1)[1].split("</tr>", 1)[0]
    assert "active &rarr; paused" in row and role_users["operator"].username in row
    assert "&#x27;next&#x27;: 6" in row or "'next': 6" in row  # where discovery got to


def test_a_connector_that_would_wait_for_itself_is_refused_naming_start_after(tmp_path, role_users):
    # a start_after naming the connector itself (or one of its own labels), or closing a circle
    # of connectors each waiting for the next, kept them `waiting` for ever: nothing could release
    (tmp_path / "in").mkdir()
    path = str(tmp_path / "in")
    api = token_client(role_users["admin"])

    def create(name, **fields):
        body = {"name": name, "kind": "files", "config": {"path": path}, **fields}
        return api.post("/api/v1/connectors/", body, format="json")

    for name, fields in [
        ("self", {"start_after": "self"}),
        ("mine", {"labels": ["grp"], "start_after": "grp"}),
    ]:
        response = create(name, **fields)
        assert response.status_code == 400, response.content
        assert list(response.json()) == ["start_after"], response.json()
        assert "itself" in response.json()["start_after"][0]
    assert create("second", labels=["stage-2"]).status_code == 201
    assert create("first", start_after="second").status_code == 201
    closing = api.patch("/api/v1/connectors/second/", {"start_after": "first"}, format="json")
    assert closing.status_code == 400, closing.content
    assert "first -> second" in closing.json()["start_after"][0] or (
        "second -> first" in closing.json()["start_after"][0]
    )
    # the same circle closed by a label
    assert (
        api.patch(
            "/api/v1/connectors/first/", {"start_after": "stage-2"}, format="json"
        ).status_code
        == 200
    )
    assert create("third", start_after="first").status_code == 201
    by_label = api.patch("/api/v1/connectors/third/", {"labels": ["stage-2"]}, format="json")
    assert by_label.status_code == 400 and list(by_label.json()) == ["labels"]
    shown = api.get("/api/v1/connectors/second/").json()
    assert shown["start_after"] == "" and shown["labels"] == ["stage-2"]
