"""Where a stored retention-breach forecast shows: `tidemark jobs show`, the overview's alert strip
inside TIDEMARK_RETENTION_WARN_SECONDS (and not outside it), /metrics, the API; and beat's
refresh, which stores a source it cannot read as `unknown` with the reason, never as safe."""

import re
import shutil
from datetime import timedelta

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from django.test import override_settings
from django.utils import timezone
from rest_framework.authtoken.models import Token

from inventory import selectors_alerts
from inventory.models import RetentionForecast
from inventory.services import scheduling
from inventory.services.connectors import connector_create
from inventory.services.retention_forecast import retention_forecasts_refresh
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory, make_job
from tidemark_cli import main as cli_main


def _forecast(job, *, verdict="at_risk", margin=5400.0, message=None):
    return RetentionForecast.objects.create(
        job=job,
        verdict=verdict,
        margin_seconds=margin,
        loss_at=None if margin is None else timezone.now() + timedelta(seconds=margin),
        message=message or "at current rates this job starts losing data in ~1.5 h",
        inputs={
            "streams": [
                {
                    "name": "partition 0",
                    "verdict": verdict,
                    "margin_seconds": margin,
                    "retention_ms": 86_400_000,
                    "log_start_offset": 120,
                    "needed_offset": 4000,
                }
            ]
        },
        computed_at=timezone.now(),
    )


@pytest.mark.django_db(transaction=True)
def test_jobs_show_prints_the_forecast_and_its_inputs(live_server, role_users, monkeypatch, capsys):
    job = make_job(connector=ConnectorFactory(name="topic-src"), name="behind")
    _forecast(job)
    token = Token.objects.create(user=role_users["viewer"])
    monkeypatch.setenv("TIDEMARK_URL", live_server.url)
    monkeypatch.setenv("TIDEMARK_TOKEN", token.key)
    assert cli_main.main(["jobs", "show", "behind"]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"^retention_forecast$\n^  verdict\s+at_risk$", shown, re.M), shown
    assert re.search(r"^  margin_seconds\s+1 h 30 min$", shown, re.M), shown
    assert "at current rates this job starts losing data in ~1.5 h" in shown
    assert re.search(r"partition 0\s+at_risk\s+86400000\s+4000", shown), shown


@pytest.mark.django_db
def test_the_alert_strip_shows_forecasts_inside_the_threshold_only():
    near = make_job(name="near")
    far = make_job(name="far")
    lost = make_job(name="gone")
    safe = make_job(name="fine")
    _forecast(near, margin=3600.0)
    _forecast(
        far, margin=3 * 86_400.0, message="at current rates this job starts losing data in ~3.0 d"
    )
    _forecast(
        lost,
        verdict="lost",
        margin=0.0,
        message="losing data now: the job needs data the source no longer holds",
    )
    _forecast(
        safe,
        verdict="safe",
        margin=None,
        message="safe: catching up faster than retention advances",
    )
    with override_settings(RETENTION_WARN_SECONDS=86_400):
        shown = [a for a in selectors_alerts.alerts() if a.kind == "retention_breach"]
    assert [a.subject for a in shown] == ["gone", "near"]
    assert shown[1].message == "near: at current rates this job starts losing data in ~1.5 h"
    assert shown[1].url.endswith("/jobs/near/#retention")
    with override_settings(RETENTION_WARN_SECONDS=600):
        assert [a.subject for a in selectors_alerts.alerts() if a.kind == "retention_breach"] == [
            "gone"
        ]


@pytest.mark.django_db
@override_settings(METRICS_CACHE_SECONDS=0)
def test_metrics_write_the_margin_of_jobs_with_a_forecast_loss_and_the_api_null_otherwise(
    role_users,
):
    at_risk = make_job(name="at-risk")
    quiet = make_job(name="quiet")
    _forecast(at_risk, margin=1234.5)
    client = token_client(role_users["viewer"])
    text = client.get("/metrics").content.decode()
    assert 'tidemark_retention_margin_seconds{job="at-risk"} 1234.5' in text
    assert 'tidemark_retention_margin_seconds{job="quiet"}' not in text
    assert client.get("/api/v1/jobs/quiet/").json()["retention_forecast"] is None
    assert quiet.pk  # the job exists: its forecast is null, not missing


@pytest.mark.django_db(transaction=True)
def test_beat_refreshes_forecasts_and_stores_an_unreadable_source_as_unknown(tmp_path):
    assert (
        scheduling.FIXED_STEPS[scheduling.RETENTION_FORECASTS][0] == "tidemark.retention_forecasts"
    )
    path = tmp_path / "table"
    write_deltalake(str(path), pa.table({"n": [1]}))
    connector = connector_create(name="soon-gone", kind="delta", config={"path": str(path)})
    job = make_job(connector=connector, name="reads-gone")
    # nothing registered yet: the job needs only versions still to come
    assert retention_forecasts_refresh() == {"reads-gone": "safe"}
    stored = RetentionForecast.objects.get(job=job)
    assert stored.inputs["streams"][0]["name"] == "log retention"
    assert "vacuum is not forecast" in stored.inputs["streams"][0]["vacuum"]

    shutil.rmtree(path)
    assert retention_forecasts_refresh() == {"reads-gone": "unknown"}
    stored.refresh_from_db()
    assert stored.margin_seconds is None
    assert "is not a Delta table" in stored.error


@pytest.mark.django_db(transaction=True)
def test_an_iceberg_tables_expiry_inputs_show_on_the_job_page_the_api_and_the_cli(
    live_server, role_users, client, monkeypatch, capsys, tmp_path
):
    from pyiceberg.catalog.sql import SqlCatalog

    uri = f"sqlite:///{tmp_path}/catalog.db"
    catalog = SqlCatalog("tidemark", uri=uri, warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    rows = pa.table({"n": pa.array([1], pa.int64())})
    table = catalog.create_table(
        "ns.t",
        schema=rows.schema,
        properties={
            "history.expire.max-snapshot-age-ms": "3600000",
            "history.expire.min-snapshots-to-keep": "2",
        },
    )
    table.append(rows)
    table.append(rows)
    connector = connector_create(
        name="lake-src", kind="iceberg", config={"catalog_uri": uri, "table": "ns.t"}
    )
    job = make_job(connector=connector, name="lake-reader")
    # it needs the first snapshot (nothing registered yet), expired an hour after its commit
    assert retention_forecasts_refresh() == {"lake-reader": "at_risk"}
    stored = RetentionForecast.objects.get(job=job)
    assert stored.margin_seconds == pytest.approx(3600, abs=60)

    client.force_login(role_users["viewer"])
    page = client.get(f"/jobs/{job.name}/").content.decode()
    assert "<th>snapshot expiry</th>" in page
    assert "max_snapshot_age_seconds 3600.0" in page and "min_snapshots_to_keep 2" in page
    assert "fewer than two expiry runs in the metadata log" in page
    detail = token_client(role_users["viewer"]).get(f"/api/v1/jobs/{job.name}/").json()
    [stream] = detail["retention_forecast"]["inputs"]["streams"]
    assert (stream["snapshots_held"], stream["max_snapshot_age_from"]) == (2, "table property")

    token, _ = Token.objects.get_or_create(user=role_users["viewer"])
    monkeypatch.setenv("TIDEMARK_URL", live_server.url)
    monkeypatch.setenv("TIDEMARK_TOKEN", token.key)
    assert cli_main.main(["jobs", "show", job.name]) == 0
    shown = capsys.readouterr().out
    # a table of the streams, a column per input (in the order the stored JSON gives them)
    header, row = (
        line.strip()
        for line in shown.splitlines()
        if line.strip().startswith(("NAME", "snapshot expiry"))
    )
    for column in ("MAX_SNAPSHOT_AGE_SECONDS", "MIN_SNAPSHOTS_TO_KEEP", "EXPIRY_RUNS_SEEN"):
        assert column in header.split(), header
    assert re.search(r"\sat_risk\s", row) and re.search(r"\stable property\s", row), row
    assert re.search(r"\s1 h(\s|$)", row) and "fewer than two expiry runs" in row, row
