"""Paging of the API's lists (inventory/api/paging.py): page numbers and a page size on the lists
by name, a cursor and a page size on the newest-first ones; a paging value that is not one is a
400 naming the parameter, never a silent fallback to the default page; a path no endpoint serves is
a JSON 404."""

import pytest

from inventory.services import lifecycle
from tests.support.api_support import make_inventory, token_client
from tests.support.factories import ConnectorFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(role_users):
    return token_client(role_users["viewer"])


def test_lists_by_name_take_a_page_size_and_say_how_many_pages_there_are(api):
    for n in range(5):
        ConnectorFactory(name=f"paged-{n}")
    first = api.get("/api/v1/connectors/?page_size=2")
    assert first.status_code == 200, first.content
    assert [c["name"] for c in first.json()["results"]] == ["paged-0", "paged-1"]
    assert first.json()["count"] == 5
    second = api.get(first.json()["next"])
    assert [c["name"] for c in second.json()["results"]] == ["paged-2", "paged-3"]
    past = api.get("/api/v1/connectors/?page_size=2&page=4")
    assert past.status_code == 404
    assert "past the last page (3)" in past.json()["detail"]


def test_newest_first_lists_page_by_cursor_and_size(api):
    _, job = make_inventory(weights=[40] * 6, batch_weight=40)
    ids = []
    for _ in range(3):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
        ids.append(batch.pk)
    first = api.get("/api/v1/batches/?page_size=2")
    assert [b["id"] for b in first.json()["results"]] == ids[::-1][:2]
    rest = api.get(first.json()["next"])
    assert [b["id"] for b in rest.json()["results"]] == ids[:1]


@pytest.mark.parametrize(
    ("url", "parameter"),
    [
        ("/api/v1/connectors/?page=0", "page"),
        ("/api/v1/connectors/?page=abc", "page"),
        ("/api/v1/connectors/?page=last", "page"),
        ("/api/v1/connectors/?page=-1", "page"),
        ("/api/v1/jobs/?page_size=0", "page_size"),
        ("/api/v1/jobs/?page_size=1001", "page_size"),
        ("/api/v1/jobs/?page_size=ten", "page_size"),
        ("/api/v1/batches/?page_size=0", "page_size"),
        ("/api/v1/batches/?page_size=99999999999999999999999", "page_size"),
        ("/api/v1/backfills/?page_size=x", "page_size"),
        ("/api/v1/batches/?cursor=zzz", "cursor"),
        ("/api/v1/backfills/?cursor=cD0-", "cursor"),
    ],
)
def test_a_paging_value_that_is_not_one_is_a_400_naming_it(api, url, parameter):
    response = api.get(url)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [parameter]
    assert (
        "cursor" in response.json()[parameter][0] or "whole number" in response.json()[parameter][0]
    )


@pytest.mark.parametrize(
    ("url", "parameter"),
    [
        # a newest-first list has no page numbers, and a list by name no cursor
        ("/api/v1/batches/?page=2", "page"),
        ("/api/v1/backfills/?page=2", "page"),
        ("/api/v1/connectors/?cursor=abc", "cursor"),
    ],
)
def test_a_paging_parameter_the_list_does_not_read_is_refused_not_ignored(api, url, parameter):
    response = api.get(url)
    assert response.status_code == 400, response.content
    assert "unknown query parameter" in response.json()[parameter][0]


def test_a_path_under_the_api_that_no_endpoint_serves_is_a_json_404(api, client, role_users):
    response = api.get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "no API endpoint at /api/v1/no-such-thing/"}
    client.force_login(role_users["viewer"])
    page = client.get("/no-such-page/")  # the dashboard's own 404 page stays HTML
    assert page.status_code == 404
    assert page["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/connectors/{connector}/items/",
        "/api/v1/connectors/{connector}/events/",
        "/api/v1/jobs/{job}/watermark/history/",
        "/api/v1/jobs/{job}/restatements/",
    ],
)
def test_a_list_without_filters_refuses_a_parameter_it_does_not_read(api, path):
    connector, job = make_inventory()
    url = path.format(connector=connector.name, job=job.name)
    assert api.get(f"{url}?page_size=1").status_code == 200
    response = api.get(f"{url}?page_size=1&job=other")
    assert response.status_code == 400, response.content
    assert "unknown query parameter" in response.json()["job"][0]


@pytest.mark.parametrize(
    ("path", "query", "parameter"),
    [
        # past PostgreSQL's bigint these reached the database: "bigint out of range", no field
        ("/api/v1/alerts/", "page=99999999999999999999999", "page"),
        ("/api/v1/jobs/{job}/gaps/", "upper=99999999999999999999999", "upper"),
        ("/api/v1/jobs/{job}/gaps/", "lower=-99999999999999999999999", "lower"),
        # an inverted range answered 200 with nothing in it
        ("/api/v1/jobs/{job}/gaps/", "lower=50&upper=3", "upper"),
    ],
)
def test_a_range_or_page_value_out_of_bounds_is_a_400_naming_it(api, path, query, parameter):
    _, job = make_inventory()
    response = api.get(path.format(job=job.name) + "?" + query)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [parameter], response.json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"upper": 2**70}, "upper"),
        ({"lower": 0, "upper": 10, "priority": 2**40}, "priority"),
        ({"lower": 50, "upper": 3}, "upper"),
    ],
)
def test_a_holes_backfill_out_of_bounds_is_a_400_naming_the_field(role_users, body, field):
    _, job = make_inventory()
    operator = token_client(role_users["operator"])
    response = operator.post(f"/api/v1/jobs/{job.name}/gaps/backfill/", body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field], response.json()


def test_the_restatements_list_still_reads_its_status_filter(api):
    _, job = make_inventory()
    url = f"/api/v1/jobs/{job.name}/restatements/"
    assert api.get(f"{url}?status=applied").status_code == 200
    assert "status" in api.get(f"{url}?status=nonsense").json()


def test_the_jobs_list_reads_paused_as_true_or_false_and_refuses_another_word(api):
    make_inventory(name="running-job")
    make_inventory(name="paused-job", paused=True)

    def names(query):
        response = api.get(f"/api/v1/jobs/?{query}")
        assert response.status_code == 200, response.content
        return [job["name"] for job in response.json()["results"]]

    assert names("paused=true") == names("paused=1") == ["paused-job"]
    assert names("paused=False") == names("paused=0") == ["running-job"]
    assert sorted(names("paused=")) == ["paused-job", "running-job"]
    for word in ("maybe", "yes", "2"):
        refused = api.get(f"/api/v1/jobs/?paused={word}")
        assert refused.status_code == 400, refused.content
        assert refused.json() == {"paused": ["must be true or false"]}
