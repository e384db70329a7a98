"""A connector read by many jobs: its count of jobs everywhere, its jobs only a page at a time
(the API's job list filtered by connector, the overview filtered by connector)."""

import pytest
from django.test import Client

from inventory.views import overview as overview_views
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory, make_assets, make_job, many_jobs

pytestmark = pytest.mark.django_db

N_JOBS = 230


@pytest.fixture
def wide():
    connector = ConnectorFactory(name="wide")
    make_assets(connector, [10])
    many_jobs(connector, N_JOBS, prefix="wide-job")
    make_job(connector=ConnectorFactory(name="narrow"), name="elsewhere")
    return connector


def test_the_api_pages_a_connector_s_jobs_with_the_count_of_all_of_them(wide, role_users):
    """Each page holds page_size jobs of that connector (the last one the rest), `count` is all
    of them, and following `next` reads every job once."""
    api = token_client(role_users["viewer"])
    detail = api.get("/api/v1/connectors/wide/").json()
    assert detail["job_count"] == N_JOBS
    seen, url, sizes = [], f"{detail['jobs_url']}&page_size=100", []
    while url:
        page = api.get(url).json()
        assert page["count"] == N_JOBS
        sizes.append(len(page["results"]))
        seen += [row["name"] for row in page["results"]]
        assert {row["connector"] for row in page["results"]} == {"wide"}
        url = page["next"]
    assert sizes == [100, 100, N_JOBS - 200]
    assert sorted(seen) == [f"wide-job-{i:04d}" for i in range(N_JOBS)]
    default = api.get(detail["jobs_url"]).json()
    assert len(default["results"]) == 100  # REST_FRAMEWORK's PAGE_SIZE


def test_a_page_size_over_the_limit_is_refused_naming_the_parameter(wide, role_users):
    api = token_client(role_users["viewer"])
    response = api.get("/api/v1/jobs/?connector__name=wide&page_size=5000")
    assert response.status_code == 400
    assert "page_size" in response.json()


def test_the_overview_of_a_connector_renders_one_page_of_its_jobs(wide, role_users):
    client = Client()
    client.force_login(role_users["viewer"])
    page = client.get("/?connector=wide").content.decode()
    rows = [part.split('"', 1)[0] for part in page.split('data-job="')[1:]]
    assert len(rows) == overview_views.OVERVIEW_PAGE < N_JOBS
    assert set(rows) <= {f"wide-job-{i:04d}" for i in range(N_JOBS)}
    assert f"{N_JOBS} of {N_JOBS + 1} job(s)" in page
    connectors = client.get("/connectors/").content.decode()
    assert "wide-job-" not in connectors
    assert f"{N_JOBS} jobs</a>" in connectors


def test_the_connector_s_delete_page_names_a_few_jobs_and_links_all_of_them(wide, role_users):
    """The page that refuses the delete while jobs read the connector names JOBS_NAMED of them
    and links the rest (the overview filtered to it), and counts the connector's items from its
    last asset's running count."""
    from inventory.views import deleting

    client = Client()
    client.force_login(role_users["admin"])
    page = client.get("/connectors/wide/delete/").content.decode()
    named = [part.split("/", 1)[0] for part in page.split('href="/jobs/')[1:]]
    assert named == [f"wide-job-{i:04d}" for i in range(deleting.JOBS_NAMED)]
    more = N_JOBS - deleting.JOBS_NAMED
    assert f"and {more} others" in page
    assert f'href="/?connector=wide" id="connector-jobs">all {N_JOBS} jobs</a>' in page
    assert "its 1 registered item," in page
    # a connector read by fewer jobs than that: every one named, no link to the rest
    few = ConnectorFactory(name="few")
    make_job(connector=few, name="only-reader")
    page = client.get("/connectors/few/delete/").content.decode()
    assert 'href="/jobs/only-reader/delete/"' in page and "connector-jobs" not in page
