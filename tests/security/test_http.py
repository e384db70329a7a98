"""The HTTP surface against anyone: every URL of the URLconf walked.

- Anonymous requests and revoked tokens get nothing anywhere (API, dashboard, admin, schema, docs,
  metrics); a user in no role group reads nothing; each role may only what it may.
- Session POSTs need the CSRF token (API, dashboard, admin); GETs change nothing.
- Oversize bodies get 413 and malformed JSON 400, with no traceback and nothing stored.
- List filters go through an allow-list: unknown parameters (ORM lookups, ordering) are a 400.
- Token clients above their rate get 429.
"""

import hashlib

import pytest
from django.apps import apps
from django.core.cache import cache
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from inventory.models import Connector, ConnectorState
from tests.support.api_support import token_client
from tests.support.url_walk import PUBLIC, WRITE_ROLES, _all_urls, _api_methods, _template

pytestmark = pytest.mark.django_db

ROLES = ("norole", "viewer", "operator", "admin")


def _refused_anonymous(response) -> bool:
    if response.status_code in (401, 403, 405):
        return True
    location = response.get("Location", "")
    return response.status_code == 302 and "login" in location


def test_anonymous_requests_get_nothing_anywhere(world):
    client = Client()
    urls = _all_urls(world)
    assert len(urls) > 100  # the walk really covers the URLconf (admin included)
    for url in urls:
        if url.lstrip("/") in PUBLIC:
            continue
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            assert _refused_anonymous(response), (method, url, response.status_code)
    assert Connector.objects.get(pk=world["connector"].pk).state == ConnectorState.ACTIVE


def test_a_revoked_or_unknown_token_gets_a_401_on_every_api_url(world, role_users, settings):
    # more bad tokens than the per-address brake allows (tests/security/test_logins.py tests the brake)
    settings.TIDEMARK_TOKEN_FAILURE_LIMIT = 10_000
    token = Token.objects.create(user=role_users["admin"])
    key = token.key
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/jobs/").status_code == 200
    token.delete()  # revoked
    for method, url in _api_methods(world):
        response = getattr(api, method)(url, {}, format="json")
        assert response.status_code == 401, (method, url, response.status_code)
    for url in ("/api/schema/", "/metrics"):
        assert api.get(url).status_code == 401, url
    role_users["viewer"].is_active = False  # a deactivated user's token is refused too
    role_users["viewer"].save()
    assert token_client(role_users["viewer"]).get("/api/v1/jobs/").status_code == 401


def test_each_role_may_only_what_it_may_on_every_api_route(world, role_users):
    cache.clear()  # throttle counters
    undecided = []
    for method, url in _api_methods(world):
        key = (method, _template(url, world))
        if method == "get":
            lowest = "viewer"
        elif key in WRITE_ROLES:
            lowest = WRITE_ROLES[key]
        else:
            undecided.append(key)
            continue
        # only the refusals are asserted: an allowed call would act (the role tests do that)
        for role in ROLES[: ROLES.index(lowest)]:
            response = getattr(token_client(role_users[role]), method)(url, {}, format="json")
            assert response.status_code == 403, (role, method, url, response.status_code)
        if method == "get":
            response = token_client(role_users["viewer"]).get(url)
            assert response.status_code == 200, (url, response.status_code)
    assert not undecided, f"API writes with no role decided in this test: {undecided}"


def test_pages_need_the_viewer_role_and_actions_the_operator_role(world, role_users):
    norole, viewer, operator = Client(), Client(), Client()
    norole.force_login(role_users["norole"])
    viewer.force_login(role_users["viewer"])
    operator.force_login(role_users["operator"])
    public = ("/admin", "/api", "/acc", "/favicon.ico")
    dashboard = [url for url in _all_urls(world) if not url.startswith(public)]
    for url in dashboard:
        assert norole.get(url).status_code in (401, 403, 405), url
        assert norole.post(url).status_code in (401, 403, 405), url
    job, connector = world["job"].name, world["connector"].name
    for url in (
        f"/jobs/{job}/run/",
        f"/jobs/{job}/pause/",
        f"/connectors/{connector}/pause/",
        f"/connectors/{connector}/discover/",
        "/backfills/preview/",
        f"/backfills/{world['backfill'].pk}/cancel/",
        f"/batches/{world['dead'].pk}/retry/",
        "/backfills/throttle/",
        "/new/connector/",
        "/new/job/",
        f"/connectors/{connector}/edit/",
        f"/jobs/{job}/edit/",
    ):
        assert viewer.post(url).status_code == 403, url
    assert operator.post(f"/batches/{world['dead'].pk}/skip/", {"reason": "x"}).status_code == 403
    # the admin site: no role, no staff flag -> the login page; viewers may not change objects
    assert norole.get("/admin/inventory/job/").status_code == 302
    change = f"/admin/inventory/job/{world['job'].pk}/change/"
    assert viewer.post(change, {"batch_weight": 1}).status_code == 403
    assert viewer.get("/admin/auth/user/").status_code == 403
    assert operator.get("/admin/authtoken/tokenproxy/").status_code == 403
    # users, their groups and tokens are the superusers' alone (docs/security.md)
    admin = Client()
    admin.force_login(role_users["admin"])
    for url in ("/admin/auth/user/", "/admin/auth/user/add/", "/admin/auth/group/"):
        assert admin.get(url).status_code == 403, url
    assert admin.get("/admin/authtoken/tokenproxy/").status_code == 403
    assert admin.get(change).status_code == 200  # while Tidemark's own objects are its to edit


def _database_state() -> str:
    """A digest of every row of every model (Tidemark's, auth, tokens, sessions, beat)."""
    digest = hashlib.sha256()
    for model in apps.get_models():
        if model._meta.db_table == "django_session" or model._meta.proxy:
            continue  # a GET may refresh the session's expiry; nothing else may change
        for row in model.objects.order_by("pk").values_list():
            digest.update(repr(row).encode())
    return digest.hexdigest()


def test_there_are_no_format_suffix_routes(world, role_users):
    """`/api/v1/batches/1.json` once reached views that take no `format` argument: a 500."""
    api = token_client(role_users["viewer"])
    assert api.get(f"/api/v1/batches/{world['dead'].pk}.json").status_code == 404
    assert api.get(f"/api/v1/batches/{world['dead'].pk}/?format=json").status_code == 200


def test_gets_change_nothing(world, role_users, django_user_model):
    root = django_user_model.objects.create_superuser("root", password=None)
    client = Client()
    client.force_login(root)
    api = token_client(root)
    before = _database_state()
    for url in _all_urls(world):
        if url in ("/accounts/logout/", "/admin/logout/"):
            assert client.get(url).status_code == 405  # logging out needs a POST
            continue
        client.get(url)
        if url.startswith("/api/"):
            api.get(url)
    assert _database_state() == before


def test_session_posts_need_the_csrf_token(world, role_users):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(role_users["admin"])
    connector = world["connector"]
    for url in (
        f"/api/v1/connectors/{connector.name}/pause/",
        f"/connectors/{connector.name}/pause/",
        "/admin/inventory/connector/",
    ):
        data = {"action": "pause_connectors", "_selected_action": [connector.pk]}
        response = browser.post(url, data)
        assert response.status_code == 403, url
        assert "CSRF" in response.content.decode(), url
    connector.refresh_from_db()
    assert connector.state == ConnectorState.ACTIVE

    browser.get("/connectors/")  # sets the csrftoken cookie, as a browser would
    token = browser.cookies["csrftoken"].value
    response = browser.post(f"/connectors/{connector.name}/pause/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    connector.refresh_from_db()
    assert connector.state == ConnectorState.PAUSED


# ---- bad payloads ------------------------------------------------------------------------------


def _no_traceback(response) -> None:
    body = response.content.decode(errors="replace")
    assert "Traceback" not in body and 'File "' not in body


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=64 * 1024)
def test_an_oversize_body_is_a_413_and_stores_nothing(world, role_users, tmp_path):
    api = token_client(role_users["admin"])
    payload = {
        "name": "huge",
        "kind": "files",
        "config": {"path": str(tmp_path), "padding": "x" * (80 * 1024)},
    }
    response = api.post("/api/v1/connectors/", payload, format="json")
    assert response.status_code == 413
    assert "larger than" in response.json()["detail"]
    _no_traceback(response)
    assert not Connector.objects.filter(name="huge").exists()
    browser = Client()
    browser.force_login(role_users["operator"])
    response = browser.post("/backfills/", {"reason": "x" * (80 * 1024)})
    assert response.status_code == 413


@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "broken", "kind": ',
        b'["name", "broken"]',
        b'{"name": "broken", "kind": "files", "config": {"path": "/tmp"}}\xff\xfe',
        b"\x00\x01\x02",
        b'{"name": "broken", "kind": "files", "config": "' + b"[" * 5000 + b'"}',
    ],
)
def test_malformed_json_is_a_400_with_no_traceback_and_nothing_stored(world, role_users, body):
    api = token_client(role_users["admin"])
    response = api.generic("POST", "/api/v1/connectors/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    _no_traceback(response)
    assert not Connector.objects.filter(name="broken").exists()


# ---- filters -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "parameter"),
    [
        ("/api/v1/connectors/?config__password__startswith=h", "config__password__startswith"),
        ("/api/v1/connectors/?name__regex=.*", "name__regex"),
        ("/api/v1/connectors/?ordering=-config", "ordering"),
        (
            "/api/v1/jobs/?connector__config__dsn__icontains=pass",
            "connector__config__dsn__icontains",
        ),
        ("/api/v1/jobs/?sink__contains=x", "sink__contains"),
        (
            "/api/v1/batches/?job__connector__config__has_key=path",
            "job__connector__config__has_key",
        ),
        ("/api/v1/batches/?ordering=error", "ordering"),
        ("/api/v1/backfills/?search=x", "search"),
    ],
)
def test_unknown_query_parameters_are_refused_not_ignored(world, role_users, url, parameter):
    response = token_client(role_users["viewer"]).get(url)
    assert response.status_code == 400
    assert parameter in response.json()
    assert "accepts" in response.json()[parameter][0]


def test_declared_filters_and_paging_still_work(world, role_users):
    api = token_client(role_users["viewer"])
    assert api.get("/api/v1/connectors/?kind=files&state=active&page=1").status_code == 200
    assert api.get(f"/api/v1/jobs/?connector__name={world['connector'].name}").json()["results"]
    listed = api.get("/api/v1/batches/?status=dead&status=running&page_size=1")
    assert listed.status_code == 200
    assert len(listed.json()["results"]) == 1
    assert api.get(listed.json()["next"]).status_code == 200  # the cursor is a paging parameter


def test_token_clients_above_their_write_rate_get_429(world, role_users):
    from django.conf import settings

    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "write": "2/min"}
    cache.clear()
    with override_settings(
        REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    ):
        api = token_client(role_users["operator"])
        url = f"/api/v1/connectors/{world['connector'].name}/pause/"
        codes = [api.post(url).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert int(api.post(url)["Retry-After"]) > 0
    cache.clear()


def test_a_refusal_says_when_to_retry_after_the_rate_was_lowered(world, role_users):
    """Calls counted under a higher rate leave more in the history than the lowered budget:
    the refusal still carries a Retry-After, the time until enough of them leave the window
    (DRF's answer there was no header at all)."""
    from django.conf import settings

    api = token_client(role_users["viewer"])
    url = f"/api/v1/connectors/{world['connector'].name}/"
    cache.clear()
    for rate, calls in (("10/min", 5), ("2/min", 1)):
        rates = {**api_settings.DEFAULT_THROTTLE_RATES, "read": rate}
        with override_settings(
            REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
        ):
            answers = [api.get(url) for _ in range(calls)]
    assert answers[-1].status_code == 429
    assert 1 <= int(answers[-1]["Retry-After"]) <= 60
    cache.clear()
