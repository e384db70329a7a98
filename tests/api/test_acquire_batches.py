"""jobs/<name>/acquire-batches/ and succeed-batches/: several batches in one call through the REST
API and the Python client's methods, for operators only, with a 400 naming the field for bad
input and nothing committed then."""

import pytest

from inventory.models import Batch, BatchStatus, Watermark
from tests.support.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db

WEIGHTS = (40, 40, 40, 40, 40, 40, 40, 40)


def _acquire(client, job, **body):
    return client.post(
        f"/api/v1/jobs/{job.name}/acquire-batches/", {"worker": "app", **body}, format="json"
    )


def test_an_operator_takes_three_batches_and_commits_them_in_one_call(role_users):
    _, job = make_inventory(weights=WEIGHTS, batch_weight=80, max_items=2)
    client = token_client(role_users["operator"])

    response = _acquire(client, job, count=3, lease_seconds=120)

    assert response.status_code == 200, response.content
    batches = response.json()["batches"]
    assert len(batches) == 3
    assert [b["range_start"] for b in batches[1:]] == [b["range_end"] + 1 for b in batches[:-1]]
    assert all(len(b["items"]) == 2 and b["attempt"] == 1 for b in batches)
    assert all(b["job"] == job.name and b["status"] == "running" for b in batches)

    response = client.post(
        f"/api/v1/jobs/{job.name}/succeed-batches/",
        {
            "batches": [
                {"id": b["id"], "attempt": b["attempt"], "result": {"rows": 2}} for b in batches
            ]
        },
        format="json",
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert [b["id"] for b in body["committed"]] == [b["id"] for b in batches]
    assert {b["status"] for b in body["committed"]} == {"succeeded"}
    assert body["refused"] == []
    assert Watermark.objects.get(job=job).position == batches[-1]["range_end"] + 1


def test_a_commit_of_a_lost_attempt_is_refused_with_its_reason_and_the_rest_commit(role_users):
    _, job = make_inventory(weights=WEIGHTS, batch_weight=80, max_items=2)
    client = token_client(role_users["operator"])
    first, second = _acquire(client, job, count=2).json()["batches"]

    response = client.post(
        f"/api/v1/jobs/{job.name}/succeed-batches/",
        {
            "batches": [
                {"id": first["id"], "attempt": first["attempt"]},
                {"id": second["id"], "attempt": second["attempt"] + 1},
            ]
        },
        format="json",
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert [b["id"] for b in body["committed"]] == [first["id"]]
    assert body["refused"] == [
        {
            "id": second["id"],
            "reason": f"batch {second['id']} is on attempt 1; attempt 2 may not report",
        }
    ]
    assert Batch.objects.get(pk=second["id"]).status == BatchStatus.RUNNING


def test_nothing_waiting_is_an_empty_list(role_users):
    _, job = make_inventory(weights=(40,), batch_weight=80)
    client = token_client(role_users["operator"])
    assert len(_acquire(client, job, count=5).json()["batches"]) == 1
    response = _acquire(client, job, count=5)
    assert response.status_code == 200 and response.json() == {"batches": []}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "count"),
        ({"count": 0}, "count"),
        ({"count": 101}, "count"),
        ({"count": "many"}, "count"),
        ({"count": 2, "lease_seconds": 0}, "lease_seconds"),
        ({"count": 2, "batch": 1}, "batch"),
        # a worker's name is shown on pages and in the admin: no control characters
        ({"count": 2, "worker": "w\x01ctl"}, "worker"),
        ({"count": 2, "worker": "w\u2028x"}, "worker"),
        ({"count": 2, "worker": "w\u202ex"}, "worker"),
    ],
)
def test_a_bad_acquire_is_a_400_naming_the_field(role_users, body, field):
    _, job = make_inventory(weights=WEIGHTS)
    client = token_client(role_users["operator"])
    response = _acquire(client, job, **body)
    assert response.status_code == 400
    assert field in response.json()
    assert not Batch.objects.filter(job=job).exists()


def test_a_bad_commit_is_a_400_naming_the_field_and_commits_nothing(role_users):
    _, job = make_inventory(weights=WEIGHTS, batch_weight=80, max_items=2)
    _, other = make_inventory(name="other", weights=WEIGHTS)
    client = token_client(role_users["operator"])
    (mine,) = _acquire(client, job, count=1).json()["batches"]
    (theirs,) = _acquire(client, other, count=1).json()["batches"]
    url = f"/api/v1/jobs/{job.name}/succeed-batches/"

    def commit(batches):
        return client.post(url, {"batches": batches}, format="json")

    ok = {"id": mine["id"], "attempt": 1}
    # one shape for every 400, whether the serializer or the service refuses: {path: [reasons]}
    for batches, field in (
        ([], "batches"),
        ("all", "batches"),
        ([{"attempt": 1}], "batches[0].id"),
        ([ok, {**ok, "colour": "red"}], "batches[1].colour"),
        ([{**ok, "result": [1]}], "batches[0].result"),
        ([{**ok, "attempt": "one"}], "batches[0].attempt"),
        ([ok, {"id": theirs["id"], "attempt": 1}], "batches[1].id"),
        ([ok, ok], "batches[1].id"),
        ([{**ok, "id": 2**63}], "batches[0].id"),
    ):
        response = commit(batches)
        assert response.status_code == 400, (batches, response.content)
        body = response.json()
        assert list(body) == [field], body
        assert body[field] and all(isinstance(reason, str) for reason in body[field]), body
    assert not Batch.objects.filter(status=BatchStatus.SUCCEEDED).exists()


@pytest.mark.parametrize("role", ["viewer", "norole", None])
def test_only_operators_take_or_commit_batches(role_users, role):
    _, job = make_inventory(weights=WEIGHTS)
    client = token_client(role_users[role] if role else None)
    assert _acquire(client, job, count=2).status_code in (401, 403)
    response = client.post(
        f"/api/v1/jobs/{job.name}/succeed-batches/",
        {"batches": [{"id": 1, "attempt": 1}]},
        format="json",
    )
    assert response.status_code in (401, 403)
    assert not Batch.objects.filter(job=job).exists()


def test_the_schema_lists_both_calls(role_users):
    response = token_client(role_users["viewer"]).get("/api/schema/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "/api/v1/jobs/{name}/acquire-batches/" in text
    assert "/api/v1/jobs/{name}/succeed-batches/" in text


@pytest.mark.django_db(transaction=True)
def test_the_python_client_takes_and_commits_several_batches(live_server, role_users):
    from rest_framework.authtoken.models import Token

    from tidemark_client import Tidemark

    _, job = make_inventory(weights=WEIGHTS, batch_weight=80, max_items=2)
    token = Token.objects.create(user=role_users["operator"])
    client = Tidemark(live_server.url, token=token.key, timeout=30)

    taken = client.acquire_batches(job.name, worker="etl", count=3, lease_seconds=60)
    assert [len(b.locations) for b in taken] == [2, 2, 2]
    outcome = client.succeed_batches(taken, results={taken[0].id: {"rows_out": 7}})
    assert [b["id"] for b in outcome["committed"]] == [b.id for b in taken]
    assert outcome["committed"][0]["result"] == {"rows_out": 7}
    assert outcome["refused"] == []
    rest = client.acquire_batches(job.name, worker="etl", count=3)
    assert len(rest) == 1
    assert client.acquire_batches(job.name, worker="etl", count=3) == []
    assert Watermark.objects.get(job=job).position == taken[-1].range_end + 1


def test_both_calls_count_against_the_processing_budget(role_users):
    from django.conf import settings
    from django.core.cache import cache
    from django.test import override_settings

    _, job = make_inventory(weights=WEIGHTS)
    operator = role_users["operator"]
    keys = [f"throttle_{scope}_{operator.pk}" for scope in ("read", "write", "processing")]
    cache.delete_many(keys)
    rates = {"read": None, "write": None, "processing": "2/min"}
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    with override_settings(REST_FRAMEWORK=rest):
        client = token_client(operator)
        assert _acquire(client, job, count=1).status_code == 200
        commit = client.post(
            f"/api/v1/jobs/{job.name}/succeed-batches/",
            {"batches": [{"id": Batch.objects.get(job=job).pk, "attempt": 1}]},
            format="json",
        )
        assert commit.status_code == 200
        assert _acquire(client, job, count=1).status_code == 429
    cache.delete_many(keys)


def _counted(client, url: str, body: dict) -> tuple[dict, int]:
    """The answer to a POST and how many queries it sent."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.post(url, body, format="json")
    assert response.status_code == 200, response.content
    return response.json(), len(captured.captured_queries)


def test_more_batches_a_call_add_only_their_items_read_not_a_query_of_attempts_each(role_users):
    client = token_client(role_users["operator"])
    sizes = {}
    for count in (2, 6):
        _, job = make_inventory(name=f"sized-{count}", weights=(40,) * 12, batch_weight=40)
        body, acquired = _counted(
            client, f"/api/v1/jobs/{job.name}/acquire-batches/", {"worker": "w", "count": count}
        )
        batches = body["batches"]
        assert len(batches) == count and all(len(b["items"]) == 1 for b in batches)
        commits = [{"id": b["id"], "attempt": b["attempt"]} for b in batches]
        body, committed = _counted(
            client, f"/api/v1/jobs/{job.name}/succeed-batches/", {"batches": commits}
        )
        assert len(body["committed"]) == count
        sizes[count] = (acquired, committed)
    # four batches more: four reads of their items on acquire, nothing more on commit
    assert sizes[6][0] - sizes[2][0] == 4, sizes
    assert sizes[6][1] == sizes[2][1], sizes


@pytest.mark.django_db(transaction=True)
def test_the_python_client_commits_each_batchs_watermark_value(live_server, role_users):
    from rest_framework.authtoken.models import Token

    from tidemark_client import Tidemark

    _, job = make_inventory(
        weights=WEIGHTS, batch_weight=80, max_items=2, watermark_type="datetime"
    )
    token = Token.objects.create(user=role_users["operator"])
    client = Tidemark(live_server.url, token=token.key, timeout=30)
    taken = client.acquire_batches(job.name, worker="etl", count=2)
    reached = {
        taken[0].id: "2026-01-01T10:00:00+00:00",
        taken[1].id: "2026-01-01T11:30:00+00:00",
    }
    with pytest.raises(ValueError, match="not committed here"):
        client.succeed_batches(taken[:1], watermark_values=reached)
    outcome = client.succeed_batches(taken, watermark_values=reached)
    assert outcome["refused"] == []
    stored = {b.pk: b.watermark_value for b in Batch.objects.filter(job=job)}
    assert stored == {
        taken[0].id: "2026-01-01T10:00:00+00:00",
        taken[1].id: "2026-01-01T11:30:00+00:00",
    }
    assert Watermark.objects.get(job=job).value == "2026-01-01T11:30:00+00:00"
