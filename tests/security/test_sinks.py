"""Tidemark's own database is never a sink (issue 17, item 5), by any route.

Refused when a job is saved (400 naming `sink.dsn_env` / `sink.dsn`) and again by the PostgreSQL
sink on its own connection before it writes (a job stored before the check: the batch fails with a
clear error, and nothing is created in Tidemark's database).
"""

import pytest
from django.db import connection

from inventory.models import Batch, Job
from inventory.services import lifecycle
from inventory.services.outputs import control_plane_dsn
from tests.support.api_support import make_inventory, token_client
from tests.support.files_job import make_files_job
from tests.support.sink_database import sink_cursor, sink_database_dsn
from workers import specs
from workers.spark.errors import BatchError
from workers.spark.run import run_batch

OWN_ENV = "TM_TEST_OWN_DB_DSN"


def _passwordless_own_dsn() -> str:
    params = connection.get_connection_params()
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    return f"host={host} port={port} dbname={params.get('database') or params.get('dbname')}"


def _post_job(api, connector, sink):
    payload = {"name": "exfil", "connector": connector.name, "batch_weight": 100, "sink": sink}
    return api.post("/api/v1/jobs/", payload, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "table",
    [
        "auth_user",
        "authtoken_token",
        "pg_catalog.pg_class",
        "inventory_watermark",
        "elsewhere.copy",
        "fresh_table",
    ],
)
@pytest.mark.parametrize("route", ["database_url", "env_to_own", "passwordless_dsn"])
def test_a_sink_into_tidemarks_database_is_a_400(role_users, monkeypatch, table, route):
    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    sink = {"kind": "postgres", "table": table, "key": ["id"], "mode": "upsert"}
    if route == "database_url":
        sink["dsn_env"], field = "DATABASE_URL", "sink.dsn_env"
    elif route == "env_to_own":
        monkeypatch.setenv(OWN_ENV, control_plane_dsn())
        sink["dsn_env"], field = OWN_ENV, "sink.dsn_env"
    else:
        sink["dsn"], field = _passwordless_own_dsn(), "sink.dsn"
    response = _post_job(api, connector, sink)
    assert response.status_code == 400, response.content
    # DATABASE_URL is refused before any connection: Tidemark's own settings are never named
    reason = (
        "Tidemark's own configuration" if route == "database_url" else "Tidemark's own database"
    )
    assert reason in str(response.json()[field])
    assert not Job.objects.filter(name="exfil").exists()


@pytest.mark.django_db
def test_a_sink_into_another_database_of_the_same_server_is_accepted(role_users, monkeypatch):
    connector, _ = make_inventory()
    monkeypatch.setenv(OWN_ENV, sink_database_dsn())
    sink = {"kind": "postgres", "dsn_env": OWN_ENV, "table": "out", "key": ["id"]}
    response = _post_job(token_client(role_users["admin"]), connector, sink)
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_editing_a_job_onto_tidemarks_database_is_a_400(role_users):
    _, job = make_inventory()
    api = token_client(role_users["admin"])
    sink = {"kind": "postgres", "dsn_env": "DATABASE_URL", "table": "auth_user", "key": ["id"]}
    response = api.patch(f"/api/v1/jobs/{job.name}/", {"sink": sink}, format="json")
    assert response.status_code == 400, response.content
    assert "sink.dsn_env" in response.json()


@pytest.mark.django_db(transaction=True)
def test_the_worker_refuses_a_stored_sink_into_tidemarks_database(spark, tmp_path, monkeypatch):
    monkeypatch.setenv(OWN_ENV, sink_database_dsn())
    sink = {"kind": "postgres", "dsn_env": OWN_ENV, "table": "stolen", "mode": "append"}
    job, _ = make_files_job(tmp_path, "own-sink", sink, items=1, max_items=1)
    # a job stored before the check existed: its variable now reaches Tidemark's database
    monkeypatch.setenv(OWN_ENV, control_plane_dsn())
    batch = lifecycle.batch_acquire(job=job, worker="w")
    spec = specs.batch_spec(batch=Batch.objects.get(pk=batch.pk))
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    assert "Tidemark's own database" in caught.value.message
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('stolen')")
        assert cursor.fetchone() == (None,)
    # the same spec against the sink database writes
    monkeypatch.setenv(OWN_ENV, sink_database_dsn())
    run_batch(spark, spec)
    with sink_cursor() as cursor:
        cursor.execute("SELECT count(*) FROM stolen")
        assert cursor.fetchone()[0] > 0
