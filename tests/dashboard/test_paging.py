"""The overview and the connectors page at many jobs: paged, the ones that need a person first,
with a search box and a state filter; alerts summarised past the first few."""

import pytest
from django.test import Client

from inventory.models import ConnectorState
from inventory.services import lifecycle
from inventory.views import connectors as connector_views
from inventory.views import overview as overview_views
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def _jobs(names):
    made = {}
    for name in names:
        connector = ConnectorFactory(name=f"src-{name}")
        make_assets(connector, [10, 10])
        made[name] = make_job(connector=connector, name=name, batch_weight=10, max_attempts=1)
    return made


def _kill_one_batch(job):
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(
        batch_id=batch.id, attempt=batch.attempt, error={"type": "E", "message": "bad file"}
    )


def _rows(page: str) -> list[str]:
    return [part.split('"', 1)[0] for part in page.split('data-job="')[1:]]


def test_the_overview_pages_jobs_blocked_ones_first(role_users, monkeypatch):
    monkeypatch.setattr(overview_views, "OVERVIEW_PAGE", 2)
    jobs = _jobs(["a-1", "b-2", "c-3", "d-4"])
    _kill_one_batch(jobs["c-3"])
    viewer = _client(role_users["viewer"])

    first = viewer.get("/").content.decode()
    assert _rows(first) == ["c-3", "a-1"]  # blocked first, then by name
    assert "page 1 of 2" in first
    second = viewer.get("/?page=2").content.decode()
    assert _rows(second) == ["b-2", "d-4"]


def test_the_overview_filters_by_name_and_state(role_users):
    jobs = _jobs(["orders-a", "orders-b", "clicks"])
    _kill_one_batch(jobs["orders-b"])
    viewer = _client(role_users["viewer"])

    assert _rows(viewer.get("/?q=ORDERS").content.decode()) == ["orders-b", "orders-a"]
    assert _rows(viewer.get("/?q=src-clicks").content.decode()) == ["clicks"]  # connector name
    assert _rows(viewer.get("/?state=blocked").content.decode()) == ["orders-b"]
    page = viewer.get("/?q=nothing-like-it").content.decode()
    assert _rows(page) == [] and "No job matches." in page
    # a bad state is ignored, not an error
    assert len(_rows(viewer.get("/?state=bogus").content.decode())) == 3


def test_alerts_past_the_first_few_are_counted_by_kind(role_users, monkeypatch):
    monkeypatch.setattr(overview_views, "ALERT_STRIP", 1)
    jobs = _jobs(["x-1", "x-2", "x-3"])
    for job in jobs.values():
        _kill_one_batch(job)
    page = _client(role_users["viewer"]).get("/").content.decode()
    assert page.count('class="alert-item critical"') == 1
    # two more dead-batch alerts, and the reaper that never ran in this test
    assert "… and 3 more:" in page
    assert "2 dead batches" in page


def test_the_connectors_page_pages_waiting_and_paused_first_and_searches(role_users, monkeypatch):
    monkeypatch.setattr(connector_views, "CONNECTOR_PAGE", 2)
    for name in ["alpha", "bravo", "charlie"]:
        ConnectorFactory(name=name)
    ConnectorFactory(name="delta", state=ConnectorState.PAUSED)
    ConnectorFactory(name="echo", state=ConnectorState.WAITING, start_after="alpha")
    viewer = _client(role_users["viewer"])

    def names(page):
        return [part.split('"', 1)[0] for part in page.split('id="connector-')[1:]]

    assert names(viewer.get("/connectors/").content.decode()) == ["echo", "delta"]
    assert names(viewer.get("/connectors/?page=2").content.decode()) == ["alpha", "bravo"]
    assert names(viewer.get("/connectors/?q=CHAR").content.decode()) == ["charlie"]
    assert names(viewer.get("/connectors/?state=paused").content.decode()) == ["delta"]


def test_a_connector_with_250_jobs_shows_their_count_and_its_jobs_page_by_connector(role_users):
    """The connectors page and /api/v1/connectors/ hold a connector's job count, not its jobs'
    names; the count links to the overview filtered to that connector, which pages them."""
    from tests.support.api_support import token_client
    from tests.support.factories import many_jobs

    wide = ConnectorFactory(name="wide")
    make_assets(wide, [10])
    many_jobs(wide, 250, prefix="wide-job")
    other = ConnectorFactory(name="wide-other")  # its name contains the first's
    make_job(connector=other, name="elsewhere")
    viewer = _client(role_users["viewer"])

    page = viewer.get("/connectors/").content.decode()
    assert "wide-job-" not in page
    assert '<a href="/?connector=wide" title="the jobs of wide">250 jobs</a>' in page
    assert '<a href="/?connector=wide-other" title="the jobs of wide-other">1 job</a>' in page

    api = token_client(role_users["viewer"])
    listing = api.get("/api/v1/connectors/").json()["results"]
    found = {row["name"]: row for row in listing}
    assert found["wide"]["job_count"] == 250 and "jobs" not in found["wide"]
    assert "wide-job-" not in api.get("/api/v1/connectors/").content.decode()
    assert found["wide"]["jobs_url"] == "http://testserver/api/v1/jobs/?connector__name=wide"
    detail = api.get("/api/v1/connectors/wide/").json()
    assert detail["job_count"] == 250 and "wide-job-" not in str(detail)
    jobs = api.get(detail["jobs_url"]).json()
    assert jobs["count"] == 250 and len(jobs["results"]) < 250
    assert {row["connector"] for row in jobs["results"]} == {"wide"}

    first = viewer.get("/?connector=wide").content.decode()
    shown = _rows(first)
    assert len(shown) == overview_views.OVERVIEW_PAGE and shown[0] == "wide-job-0000"
    assert "elsewhere" not in shown
    assert f"page 1 of {-(-250 // overview_views.OVERVIEW_PAGE)}" in first
    assert "250 of 251 job(s)" in first
    assert 'href="?q=&connector=wide&state=&page=2"' in first
    last = _rows(viewer.get("/?connector=wide&page=5").content.decode())
    assert last[-1] == "wide-job-0249"
    assert _rows(viewer.get("/?connector=wide-other").content.decode()) == ["elsewhere"]
