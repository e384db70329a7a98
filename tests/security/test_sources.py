"""Tidemark's own data is never a source, and a connector's source does not change under its jobs.

- A meta table (or table source) that is one of Tidemark's tables, however it is spelled, or a view
  reading one, or a system catalog, is a 400 naming the field; nothing is created.
- A connector written before the check existed cannot serve Tidemark's tables either (items/).
- Changing the source identity of a connector with jobs is a 400 naming the field; reset/ does it
  with a reason: the jobs' watermarks start over (audited), old batches are retired, and the new
  source's items below the old watermark are processed.
- A files connector's local path must exist, be a directory and be readable.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from django.db import connection

from inventory.models import (
    Batch,
    BatchStatus,
    Connector,
    ConnectorKind,
    WatermarkEvent,
    WatermarkSource,
)
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory, make_job
from tests.support.unprivileged import refusal_seen_unprivileged

pytestmark = pytest.mark.django_db


def _meta(table, **extra):
    return {"meta_table": {"table": table, **extra}}


def _create(api, name, config, kind="files"):
    return api.post(
        "/api/v1/connectors/", {"name": name, "kind": kind, "config": config}, format="json"
    )


@pytest.fixture
def views_and_tables(db):
    """A user table in another schema named like Tidemark's, and a view reading auth_user."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE SCHEMA lake;
            CREATE TABLE lake.auth_user (uid bigint PRIMARY KEY, item text, weight bigint);
            INSERT INTO lake.auth_user SELECT g, 'row-' || g, 1 FROM generate_series(1, 3) g;
            GRANT USAGE ON SCHEMA lake TO tidemark_reader;
            GRANT SELECT ON lake.auth_user TO tidemark_reader;
            CREATE VIEW innocent_users AS
                SELECT id AS uid, password AS item, 1 AS weight FROM auth_user;
            CREATE VIEW innocent_users_2 AS SELECT * FROM innocent_users;
            """
        )


@pytest.mark.parametrize(
    "spec",
    [
        {"table": "authtoken_token", "uid_column": "user_id", "item_column": "key"},
        {"table": "auth_user", "uid_column": "id", "item_column": "password"},
        {"table": "public.auth_user", "uid_column": "id", "item_column": "password"},
        {"table": "django_session", "uid_column": "expire_date", "item_column": "session_data"},
        {"table": "inventory_batch", "uid_column": "id", "item_column": "worker"},
        {"table": "django_celery_beat_periodictask", "uid_column": "id", "item_column": "args"},
        {"table": "django_migrations", "uid_column": "id", "item_column": "name"},
        {"table": "innocent_users", "weight_column": None},
        {"table": "innocent_users_2", "weight_column": None},
        {"table": "pg_catalog.pg_authid", "uid_column": "oid", "item_column": "rolpassword"},
    ],
    ids=lambda spec: spec["table"],
)
def test_tidemarks_own_tables_are_refused_as_a_meta_table(role_users, views_and_tables, spec):
    api = token_client(role_users["admin"])
    response = _create(api, "exfiltrate", {"meta_table": spec})
    assert response.status_code == 400, response.content
    assert "config.meta_table.table" in response.json()
    message = response.json()["config.meta_table.table"][0]
    assert "own tables" in message or "system catalog" in message
    assert not Connector.objects.filter(name="exfiltrate").exists()


def test_a_table_source_naming_a_tidemark_table_is_refused(role_users):
    api = token_client(role_users["admin"])
    response = _create(
        api, "t", {"table": "auth_user", **_meta("lake_missing")}, kind=ConnectorKind.TABLE
    )
    assert response.status_code == 400
    assert "own tables" in response.json()["config.table"][0]


def test_a_user_table_named_like_a_tidemark_table_in_another_schema_is_accepted(
    role_users, views_and_tables
):
    api = token_client(role_users["admin"])
    response = _create(api, "lake", _meta("lake.auth_user"))
    assert response.status_code == 201, response.content


def test_the_check_follows_the_search_path_not_the_spelling(role_users):
    """An unqualified name is resolved as the reads resolve it, through the connection's
    search_path: with a user schema placed first, `my_events` is that schema's table (accepted),
    while `public.my_events`, a view over auth_user, is refused."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW search_path")
        original = cursor.fetchone()[0]
        cursor.execute(
            "CREATE SCHEMA first; "
            "CREATE TABLE first.my_events (uid bigint, item text, weight bigint); "
            "GRANT USAGE ON SCHEMA first TO tidemark_reader; "
            "GRANT SELECT ON first.my_events TO tidemark_reader; "
            "CREATE VIEW public.my_events AS "
            "SELECT id AS uid, password AS item, 1 AS weight FROM public.auth_user"
        )
        cursor.execute(f"SET search_path = first, {original}")
    try:
        api = token_client(role_users["admin"])
        assert _create(api, "lake", _meta("my_events")).status_code == 201
        response = _create(api, "direct", _meta("public.my_events"))
        assert response.status_code == 400
        assert "own tables" in response.json()["config.meta_table.table"][0]
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"SET search_path = {original}")


def test_case_and_quoting_cannot_smuggle_a_tidemark_table(role_users):
    api = token_client(role_users["admin"])
    # a quoted name is not an identifier; an upper-case one is quoted as given, so it names
    # another relation ("AUTH_USER"), never auth_user: either way nothing reads auth_user
    for spelling in ('"auth_user"', "AUTH_USER", "public.AUTH_USER", "auth_user; --", "a.b.c"):
        response = _create(api, "smuggle", _meta(spelling, uid_column="id"))
        assert response.status_code == 400, spelling
        assert any(field.startswith("config.meta_table") for field in response.json())
    assert not Connector.objects.filter(name="smuggle").exists()


def test_a_connector_stored_before_the_check_cannot_read_tidemarks_tables(role_users):
    """Written around the service (an old row): items/ and acquire refuse, no hash leaks."""
    admin = role_users["admin"]
    admin.set_password("a-long-test-password")
    admin.save()
    old = ConnectorFactory(
        name="old",
        config=_meta("auth_user", uid_column="id", item_column="password", weight_column=None),
    )
    job = make_job(connector=old, name="old-job")
    api = token_client(role_users["operator"])
    response = api.post(f"/api/v1/jobs/{job.name}/acquire/", {}, format="json")
    assert response.status_code == 400
    assert "config.meta_table.table" in response.json()
    assert "pbkdf2" not in response.content.decode()
    assert not Batch.objects.filter(job=job).exists()


# ---- source identity and reset -----------------------------------------------------------------


@pytest.fixture
def two_tables(db):
    """Table A with uids 1..10 and table B with uids 1..10 (different items)."""
    with connection.cursor() as cursor:
        for table in ("source_a", "source_b"):
            cursor.execute(
                f"CREATE TABLE {table} (uid bigint PRIMARY KEY, item text, weight bigint);"
                f"INSERT INTO {table} SELECT g, '{table}-' || g, 1 FROM generate_series(1, 10) g;"
                f"GRANT SELECT ON {table} TO tidemark_reader"
            )


def _drain(job):
    taken = []
    while (batch := lifecycle.batch_acquire(job=job, worker="w")) is not None:
        taken.append(batch)
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    return taken


def test_patching_the_meta_table_under_a_job_is_a_400_naming_the_field(role_users, two_tables):
    connector = connector_create(name="src", kind="files", config=_meta("source_a"))
    make_job(connector=connector, name="reader", batch_weight=100, max_items=100)
    api = token_client(role_users["admin"])
    response = api.patch("/api/v1/connectors/src/", {"config": _meta("source_b")}, format="json")
    assert response.status_code == 400
    assert "config.meta_table" in response.json()
    assert "reset" in response.json()["config.meta_table"][0]
    connector.refresh_from_db()
    assert connector.config == _meta("source_a")
    # spelling out a default is no change of identity
    response = api.patch(
        "/api/v1/connectors/src/",
        {"config": _meta("source_a", uid_column="uid"), "labels": ["x"]},
        format="json",
    )
    assert response.status_code == 200, response.content


def test_patching_the_path_under_a_job_is_refused_but_free_without_jobs(role_users, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    connector = ConnectorFactory(name="dir", config={"path": str(tmp_path / "a")})
    api = token_client(role_users["admin"])
    moved = api.patch(
        "/api/v1/connectors/dir/", {"config": {"path": str(tmp_path / "b")}}, format="json"
    )
    assert moved.status_code == 200, moved.content
    make_job(connector=connector, name="dir-job")
    response = api.patch(
        "/api/v1/connectors/dir/", {"config": {"path": str(tmp_path / "a")}}, format="json"
    )
    assert response.status_code == 400
    assert "config.path" in response.json()
    assert "dir-job" in response.json()["config.path"][0]


def test_reset_repoints_the_jobs_and_processes_the_new_sources_items(role_users, two_tables):
    connector = connector_create(name="src", kind="files", config=_meta("source_a"))
    job = make_job(connector=connector, name="reader", batch_weight=4, max_items=100)
    old = _drain(job)
    job.watermark.refresh_from_db()
    assert job.watermark.position == 11
    queued_leftover = Batch.objects.create(
        job=job,
        kind="incremental",
        status=BatchStatus.QUEUED,
        span=(11, 12),
        item_count=0,
        weight=0,
        max_attempts=3,
    )

    api = token_client(role_users["admin"])
    refused = api.post(
        "/api/v1/connectors/src/reset/", {"config": _meta("source_b"), "reason": ""}, format="json"
    )
    assert refused.status_code == 400
    assert "reason" in refused.json()
    operator = token_client(role_users["operator"]).post(
        "/api/v1/connectors/src/reset/", {"config": _meta("source_b"), "reason": "x"}, format="json"
    )
    assert operator.status_code == 403

    response = api.post(
        "/api/v1/connectors/src/reset/",
        {"config": _meta("source_b"), "reason": "table renamed upstream"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["config"] == _meta("source_b")

    job.watermark.refresh_from_db()
    assert job.watermark.position == job.start_position
    assert job.watermark.value is None
    event = WatermarkEvent.objects.filter(watermark=job.watermark).order_by("-id").first()
    assert event.source == WatermarkSource.API
    assert event.actor == "admin-user"
    assert "table renamed upstream" in event.reason
    assert "config.meta_table" in event.reason
    assert event.is_replay and event.old_position == 11 and event.new_position == 0
    statuses = dict(Batch.objects.filter(job=job).values_list("pk", "status"))
    assert {statuses[b.pk] for b in old} == {BatchStatus.SUPERSEDED}
    assert statuses[queued_leftover.pk] == BatchStatus.CANCELLED

    # every item of the new table is processed, those below the old watermark included
    new = _drain(job)
    assert sum(b.item_count for b in new) == 10
    assert min(b.span.lower for b in new) <= 1


def test_reset_is_refused_while_a_batch_of_the_jobs_runs(role_users, two_tables):
    connector = connector_create(name="src", kind="files", config=_meta("source_a"))
    job = make_job(connector=connector, name="reader", batch_weight=4, max_items=100)
    running = lifecycle.batch_acquire(job=job, worker="w")
    api = token_client(role_users["admin"])
    response = api.post(
        "/api/v1/connectors/src/reset/",
        {"config": _meta("source_b"), "reason": "moved"},
        format="json",
    )
    assert response.status_code == 409
    assert str(running.pk) in response.json()["detail"]
    connector.refresh_from_db()
    assert connector.config == _meta("source_a")


def test_the_admin_changes_the_source_only_with_a_reset_reason(role_users, two_tables):
    from django.test import Client

    connector = connector_create(name="src", kind="files", config=_meta("source_a"))
    job = make_job(connector=connector, name="reader", batch_weight=4, max_items=100)
    _drain(job)
    client = Client()
    client.force_login(role_users["admin"])
    url = f"/admin/inventory/connector/{connector.pk}/change/"
    form = {
        "labels": "[]",
        "config": '{"meta_table": {"table": "source_b"}}',
        "start_after": "",
        "reset_reason": "",
    }
    refused = client.post(url, form)
    assert refused.status_code == 200  # the form again, with the error on config
    assert "config.meta_table" in refused.content.decode()
    connector.refresh_from_db()
    assert connector.config == _meta("source_a")

    done = client.post(url, {**form, "reset_reason": "new table"})
    assert done.status_code == 302, done.content.decode()[:2000]
    connector.refresh_from_db()
    assert connector.config == _meta("source_b")
    event = WatermarkEvent.objects.filter(watermark__job=job).order_by("-id").first()
    assert event.source == WatermarkSource.ADMIN and "new table" in event.reason

    refused = client.post(
        "/admin/inventory/connector/add/",
        {
            "name": "tokens",
            "kind": "files",
            "labels": "[]",
            "config": '{"meta_table": {"table": "authtoken_token"}}',
            "start_after": "",
        },
    )
    assert refused.status_code == 200
    assert "own tables" in refused.content.decode()
    assert not Connector.objects.filter(name="tokens").exists()


# ---- a files connector's path ------------------------------------------------------------------


def test_a_files_connectors_path_is_checked_when_saved(role_users, tmp_path):
    api = token_client(role_users["admin"])
    a_file = tmp_path / "file.parquet"
    a_file.write_bytes(b"x")
    for path, reason in [
        (str(tmp_path / "missing"), "does not exist"),
        (str(a_file), "not a directory"),
        ("relative/dir", "absolute"),
    ]:
        response = _create(api, "files", {"path": path})
        assert response.status_code == 400, path
        assert reason in response.json()["config.path"][0]
    assert not Connector.objects.filter(name="files").exists()
    assert _create(api, "files", {"path": str(tmp_path)}).status_code == 201
    # an object store is reached when the connector is saved: no answer is a 400, not a
    # discovery failure out of sight (tests/sources/test_object_store.py: a missing bucket)
    refused = _create(
        api, "bucket", {"path": "s3://bucket/prefix/", "endpoint_url": "http://127.0.0.1:9"}
    )
    assert refused.status_code == 400
    assert "cannot list s3://bucket/prefix/" in refused.json()["config.path"][0]


def test_an_unreadable_directory_is_refused(role_users, settings):
    """Checked as an unprivileged user (root reads every directory): the connector's path check
    is the one a connector save runs."""
    from inventory.sources.identity import check_local_directory

    holder = Path(tempfile.mkdtemp(prefix="tidemark-locked-"))
    settings.TIDEMARK_ALLOWED_ROOTS = [*settings.TIDEMARK_ALLOWED_ROOTS, str(holder)]
    locked = holder / "locked"
    locked.mkdir(mode=0)
    os.chmod(holder, 0o755)
    try:
        outcome = refusal_seen_unprivileged(check_local_directory, str(locked))
    finally:
        locked.chmod(0o700)
        shutil.rmtree(holder)
    assert outcome == ("config.path", f"{locked} is not readable by the Tidemark process")
