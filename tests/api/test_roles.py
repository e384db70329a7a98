"""Authentication and the role matrix: anonymous 401, no role 403, viewer reads, operator runs and
processes, admin corrects and configures. Also: throttling of token clients, schema/docs/metrics
behind authentication."""

import pytest
from django.contrib.auth.models import Group
from django.test import override_settings
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from inventory.models import Backfill, Batch
from tests.support.api_support import session_client, token_client

pytestmark = pytest.mark.django_db

ROLES = ["viewer", "operator", "admin"]


@pytest.fixture
def names(world):
    """`world` (tests/conftest.py) as the API names it: connectors and jobs by name, batches and
    backfills by id, the running batch's attempt, the backfill's first and last item ids."""
    return {
        "connector": world["connector"].name,
        "job": world["job"].name,
        "dead": world["dead"].pk,
        "running": world["running"].pk,
        "attempt": world["running"].attempt,
        "backfill": world["backfill"].pk,
        "first": world["first"],
        "last": world["last"],
    }


# (method, url template, body, lowest role allowed)
ENDPOINTS = [
    ("get", "/api/v1/", None, "viewer"),
    ("get", "/api/v1/connectors/", None, "viewer"),
    ("get", "/api/v1/connectors/{connector}/", None, "viewer"),
    ("get", "/api/v1/jobs/", None, "viewer"),
    ("get", "/api/v1/jobs/{job}/", None, "viewer"),
    ("get", "/api/v1/jobs/{job}/watermark/", None, "viewer"),
    ("get", "/api/v1/jobs/{job}/watermark/history/", None, "viewer"),
    ("get", "/api/v1/batches/", None, "viewer"),
    ("get", "/api/v1/batches/{dead}/", None, "viewer"),
    ("get", "/api/v1/batches/{dead}/items/", None, "viewer"),
    ("get", "/api/v1/backfills/", None, "viewer"),
    ("get", "/api/v1/backfills/{backfill}/", None, "viewer"),
    (
        "post",
        "/api/v1/backfills/preview/",
        {"job": "{job}", "range_start": "{first}", "range_end": "{last}"},
        "viewer",
    ),
    ("post", "/api/v1/connectors/{connector}/pause/", None, "operator"),
    ("post", "/api/v1/connectors/{connector}/resume/", None, "operator"),
    ("post", "/api/v1/jobs/{job}/pause/", None, "operator"),
    ("post", "/api/v1/jobs/{job}/resume/", None, "operator"),
    ("post", "/api/v1/jobs/{job}/run/", None, "operator"),
    ("post", "/api/v1/jobs/{job}/acquire/", {"worker": "x"}, "operator"),
    ("post", "/api/v1/batches/{running}/heartbeat/", {"attempt": "{attempt}"}, "operator"),
    ("post", "/api/v1/batches/{dead}/retry/", None, "operator"),
    ("post", "/api/v1/batches/{running}/succeed/", {"attempt": "{attempt}"}, "operator"),
    (
        "post",
        "/api/v1/batches/{running}/fail/",
        {"attempt": "{attempt}", "error": {"m": 1}},
        "operator",
    ),
    ("post", "/api/v1/batches/{running}/cancel/", {"reason": "r"}, "operator"),
    (
        "post",
        "/api/v1/backfills/",
        {"job": "{job}", "range_start": "{first}", "range_end": "{last}"},
        "operator",
    ),
    ("post", "/api/v1/backfills/{backfill}/pause/", None, "operator"),
    ("post", "/api/v1/backfills/{backfill}/resume/", None, "operator"),
    ("post", "/api/v1/backfills/{backfill}/cancel/", None, "operator"),
    ("post", "/api/v1/batches/{dead}/skip/", {"reason": "r"}, "admin"),
    ("post", "/api/v1/jobs/{job}/watermark/", {"value": "{last}", "reason": "r"}, "admin"),
    (
        "post",
        "/api/v1/connectors/",
        {"name": "new-one", "kind": "files", "config": {"path": "/x"}},
        "admin",
    ),
    ("patch", "/api/v1/connectors/{connector}/", {"labels": ["x"]}, "admin"),
    (
        "post",
        "/api/v1/jobs/",
        {"name": "new-job", "connector": "{connector}", "batch_weight": 10},
        "admin",
    ),
    ("patch", "/api/v1/jobs/{job}/", {"max_items": 5}, "admin"),
    ("delete", "/api/v1/jobs/{job}/", None, "admin"),
    ("delete", "/api/v1/connectors/{connector}/", None, "admin"),
]


def _fill(value, names):
    if isinstance(value, str):
        if value.startswith("{") and value.endswith("}") and value[1:-1] in names:
            return names[value[1:-1]]
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


def _call(client, method, url, body):
    return (
        getattr(client, method)(url, body, format="json") if body else getattr(client, method)(url)
    )


@pytest.mark.parametrize(("method", "template", "body", "lowest"), ENDPOINTS)
def test_role_matrix(role_users, names, method, template, body, lowest):
    url, body = _fill(template, names), _fill(body, names)

    anonymous = _call(APIClient(), method, url, body)
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Token")
    assert _call(token_client(role_users["norole"]), method, url, body).status_code == 403

    before = _snapshot()
    for role in ROLES[: ROLES.index(lowest)]:
        refused = _call(token_client(role_users[role]), method, url, body)
        assert refused.status_code == 403, (role, refused.content)
        assert lowest in refused.json()["detail"]
    assert _snapshot() == before, "a refused request changed something"

    for role in ROLES[ROLES.index(lowest) :]:
        allowed = _call(token_client(role_users[role]), method, url, body)
        assert allowed.status_code not in (401, 403), (role, allowed.content)
        assert allowed.status_code < 500


def _snapshot():
    return (
        sorted(Batch.objects.values_list("id", "status", "attempt")),
        sorted(Backfill.objects.values_list("id", "status")),
    )


def test_a_superuser_is_an_admin(names, django_user_model):
    root = django_user_model.objects.create_superuser("root", password=None)
    response = token_client(root).post(
        f"/api/v1/batches/{names['dead']}/skip/", {"reason": "known bad file"}, format="json"
    )
    assert response.status_code == 200


def test_session_clients_need_a_csrf_token_for_writes(role_users, names):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(role_users["operator"])
    assert browser.get(f"/api/v1/jobs/{names['job']}/").status_code == 200
    response = browser.post(f"/api/v1/connectors/{names['connector']}/pause/")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_a_bad_token_is_a_401(names):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.get("/api/v1/jobs/").status_code == 401


def test_token_clients_are_throttled_per_scope_and_sessions_are_not(role_users, names):
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "read": "3/min"}
    from django.core.cache import cache

    # only this test's throttle counters (the cache may be shared with other things)
    keys = [
        f"throttle_{scope}_{user.pk}"
        for scope in ("read", "write", "processing")
        for user in role_users.values()
    ]
    cache.delete_many(keys)
    with override_settings(REST_FRAMEWORK={**_rest_settings(), "DEFAULT_THROTTLE_RATES": rates}):
        api = token_client(role_users["viewer"])
        answers = [api.get("/api/v1/jobs/") for _ in range(4)]
        assert [answer.status_code for answer in answers] == [200, 200, 200, 429]
        # on the first refusal (a fifth request once came back without the header, most likely
        # because another pytest process's cache.clear(), a FLUSHDB, had emptied this counter and
        # let it through; the cache's clear() now forgets only its own keys: controlplane/cache.py)
        assert answers[-1]["Retry-After"]
        # processing calls have their own, higher budget
        operator = token_client(role_users["operator"])
        assert (
            operator.post(f"/api/v1/jobs/{names['job']}/acquire/", {}, format="json").status_code
            != 429
        )
        browser = session_client(role_users["viewer"])
        assert [browser.get("/api/v1/jobs/").status_code for _ in range(4)] == [200] * 4
    cache.delete_many(keys)


def _rest_settings():
    from django.conf import settings

    return settings.REST_FRAMEWORK


def test_schema_and_docs_need_a_login(role_users):
    assert APIClient().get("/api/schema/").status_code == 401
    docs = APIClient().get("/api/docs/")
    assert docs.status_code == 302
    assert docs["Location"].startswith("/accounts/login/")
    viewer = session_client(role_users["viewer"])
    schema = viewer.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert "/api/v1/jobs/{name}/acquire/" in schema.json()["paths"]
    page = viewer.get("/api/docs/")
    assert page.status_code == 200
    # Swagger UI is served from the sidecar package, not a CDN (there may be no internet)
    assert "cdn.jsdelivr" not in page.content.decode()
    assert "swagger-ui-dist" in page.content.decode()


def test_login_page_is_served(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content


def test_a_session_login_opens_the_docs(client, settings, django_user_model):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from inventory.roles import role_groups_ensure

    role_groups_ensure()
    user = django_user_model.objects.create_user("reader", password="a-long-test-password")
    user.groups.add(Group.objects.get(name="viewer"))
    response = client.post(
        "/accounts/login/?next=/api/docs/",
        {"username": "reader", "password": "a-long-test-password", "next": "/api/docs/"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/api/docs/"
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/v1/jobs/").status_code == 200
