"""The security walk (issue 17): a running instance (gunicorn, DEBUG off) driven over HTTP as
anonymous, viewer, operator and admin through every URL pattern of the URLconf, path parameters
filled with real objects, plus the named things users may try (SQL, own-database sinks, a meta
table over a function, login brute force). It fails if any of them gets through.

Logged-in roles use sessions (the browser's way; sessions are not token-throttled), with the CSRF
token a browser would send, except where the walk checks that a POST without it is refused.
"""

import pytest
import requests
from axes.models import AccessAttempt
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection

from inventory.api.authentication import token_failures_reset
from inventory.models import Backfill, Batch, Connector, Job, Watermark, WatermarkEvent
from tests.support.listener import Listener
from tests.support.url_walk import PUBLIC, WRITE_ROLES, _all_urls, _api_methods, _template

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 60


def _session(server, user) -> requests.Session:
    """A browser-like session of `user` on the running server (a session row, as a login makes)."""
    http = requests.Session()
    if user is None:
        return http
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    http.cookies.set("sessionid", store.session_key)
    http.get(f"{server.url}/accounts/login/", timeout=TIMEOUT)  # sets the csrftoken cookie
    assert http.cookies.get("csrftoken")
    return http


def _send(http, server, method, url, *, csrf=True, json=None):
    headers = {"Referer": f"{server.url}/"}
    if csrf and http.cookies.get("csrftoken"):
        headers["X-CSRFToken"] = http.cookies["csrftoken"]
    return http.request(
        method,
        f"{server.url}{url}",
        headers=headers,
        json=json if json is not None else ({} if url.startswith("/api/") else None),
        allow_redirects=False,
        timeout=TIMEOUT,
    )


def _fingerprint() -> tuple:
    """What any change through the walk would show: rows and states of every resource."""
    return (
        sorted(Connector.objects.values_list("name", "state", "config")),
        sorted(Job.objects.values_list("name", "paused", "params", "sink")),
        sorted(Batch.objects.values_list("pk", "status", "attempt")),
        sorted(Backfill.objects.values_list("pk", "status")),
        sorted(Watermark.objects.values_list("pk", "value")),
        WatermarkEvent.objects.count(),
    )


def _refused(response) -> bool:
    if response.status_code in (401, 403, 405):
        return True
    return response.status_code == 302 and "login" in response.headers.get("Location", "")


def test_anonymous_gets_nothing_but_the_login_page(web_server, world):
    anonymous = _session(web_server, None)
    before = _fingerprint()
    urls = _all_urls(world)
    assert len(urls) > 100
    for url in urls:
        if url.lstrip("/") in PUBLIC:
            continue
        for method in ("GET", "POST"):
            response = _send(anonymous, web_server, method, url)
            assert _refused(response), (method, url, response.status_code)
    assert anonymous.get(f"{web_server.url}/accounts/login/", timeout=TIMEOUT).status_code == 200
    # /metrics: a Prometheus bearer token or a viewer; nothing for anyone else
    metrics = anonymous.get(
        f"{web_server.url}/metrics", headers={"Authorization": "Bearer wrong"}, timeout=TIMEOUT
    )
    assert metrics.status_code == 401
    assert _fingerprint() == before


def test_viewers_change_nothing_anywhere(web_server, world, role_users):
    viewer = _session(web_server, role_users["viewer"])
    before = _fingerprint()
    for url in _all_urls(world):
        if url.lstrip("/") in PUBLIC or url == "/api/v1/backfills/preview/":
            continue  # logging out ends only one's own session; a preview is a read
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = _send(viewer, web_server, method, url)
            assert response.status_code < 500, (method, url, response.status_code)
            if url.startswith("/api/"):
                assert response.status_code in (403, 405), (method, url, response.status_code)
            elif not _refused(response):
                # a page that answers any method as a read (the admin index): nothing changed
                assert _fingerprint() == before, (method, url, response.status_code)
    assert _fingerprint() == before
    # and reads work for them
    assert _send(viewer, web_server, "GET", "/api/v1/jobs/").status_code == 200


def test_operators_cannot_do_what_only_admins_may(web_server, world, role_users):
    operator = _session(web_server, role_users["operator"])
    before = _fingerprint()
    admin_only = [
        (method, url)
        for method, url in _api_methods(world)
        if WRITE_ROLES.get((method, _template(url, world))) == "admin"
    ]
    assert len(admin_only) >= 8
    for method, url in admin_only:
        response = _send(operator, web_server, method.upper(), url)
        assert response.status_code == 403, (method, url, response.status_code)
    # the admin site: users, groups, tokens, beat schedules, lockouts, watermark corrections
    admin_apps = ("auth", "authtoken", "django_celery_beat", "axes", "inventory/watermark")
    checked = 0
    for url in _all_urls(world):
        if url.startswith(tuple(f"/admin/{app}/" for app in admin_apps)) and url.rstrip(
            "/"
        ).endswith(("change", "add", "delete", "correct")):
            response = _send(operator, web_server, "POST", url)
            # refused, or sent back to the admin index (no such object)
            assert response.status_code in (403, 302, 405), (url, response.status_code)
            if response.status_code == 302:
                assert (
                    response.headers["Location"] in ("/admin/",)
                    or "login" in (response.headers["Location"])
                ), url
            checked += 1
    assert checked >= 5
    assert _fingerprint() == before


def test_session_posts_without_the_csrf_token_are_refused(web_server, world, role_users):
    admin = _session(web_server, role_users["admin"])
    before = _fingerprint()
    job, connector = world["job"].name, world["connector"].name
    for url in (
        f"/jobs/{job}/pause/",
        f"/connectors/{connector}/pause/",
        f"/api/v1/jobs/{job}/pause/",
        f"/api/v1/connectors/{connector}/pause/",
        f"/admin/inventory/job/{world['job'].pk}/change/",
    ):
        response = _send(admin, web_server, "POST", url, csrf=False)
        assert response.status_code == 403, (url, response.status_code)
    assert _fingerprint() == before
    # with the token the same session may act
    assert _send(admin, web_server, "POST", f"/api/v1/jobs/{job}/pause/").status_code in (200, 202)


def test_named_things_that_reach_too_far_are_refused(web_server, world, role_users):
    admin = _session(web_server, role_users["admin"])
    connector = world["connector"].name

    def post_job(**fields):
        body = {"name": "walk-evil", "connector": connector, "batch_weight": 100, **fields}
        return _send(admin, web_server, "POST", "/api/v1/jobs/", json=body)

    for query in (
        "SELECT java_method('java.lang.System', 'getenv', 'DATABASE_URL') FROM batch",
        "SELECT * FROM text.`/etc/hostname`",
        "SELECT '${env:SECRET_KEY}' FROM batch",
        "SET spark.sql.ansi.enabled=false",
        # issue 42: texts sqlglot and Spark read differently, CTE scope, sizes
        "SELECT id FROM batch /* /*+ */ UNION ALL SELECT java_method('java.lang.System', "
        "'getenv', 'SECRET_KEY') -- */",
        "SELECT id FROM batch -- \\\n/*\nUNION ALL SELECT value FROM text.`/etc/passwd` -- */",
        "/* /*+ */ INSERT OVERWRITE DIRECTORY '/tmp' USING parquet -- */\nSELECT id FROM batch",
        "SELECT id FROM batch /* /*+ */ UNION ALL SELECT TRANSFORM(id) USING 'id' FROM batch -- */",
        "WITH t AS (SELECT * FROM t) SELECT * FROM t",
        "SELECT " + ", ".join(f"id AS c{i}" for i in range(7000)) + " FROM batch",
        "SELECT " + "(" * 40 + "1" + ")" * 40 + " FROM batch",
    ):
        response = post_job(processor="sql", params={"query": query})
        assert response.status_code == 400, (query[:200], response.text[:500])
        assert "params.query" in response.json(), query[:200]
    for sink in (
        {"kind": "postgres", "dsn_env": "DATABASE_URL", "table": "auth_user", "key": ["id"]},
        {"kind": "postgres", "dsn_env": "DATABASE_URL", "table": "pg_catalog.pg_class"},
    ):
        sink.setdefault("mode", "append")
        response = post_job(sink=sink)
        assert response.status_code == 400, (sink, response.text)
        assert "sink.dsn_env" in response.json()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION walk_tokens() RETURNS TABLE (uid bigint, item text, weight bigint) "
            "LANGUAGE sql AS $$ SELECT 1::bigint, key::text, 1::bigint FROM authtoken_token $$;"
            "CREATE VIEW walk_meta AS SELECT * FROM walk_tokens();"
        )
    response = _send(
        admin,
        web_server,
        "POST",
        "/api/v1/connectors/",
        json={
            "name": "walk-meta",
            "kind": "files",
            "config": {"meta_table": {"table": "walk_meta"}},
        },
    )
    assert response.status_code == 400, response.text
    assert "walk_tokens" in str(response.json()["config.meta_table.table"])
    assert not Job.objects.filter(name="walk-evil").exists()
    assert not Connector.objects.filter(name="walk-meta").exists()


def test_names_beyond_the_deployment_are_refused_over_http(web_server, world, role_users, tmp_path):
    """Variables, hosts, paths, symlinks and NUL bytes, sent to the running server as a hostile
    admin and operator would: every one a 400 naming the field (or a normal page), none a 500,
    and no byte towards a host the deployment does not allow."""
    admin = _session(web_server, role_users["admin"])
    operator = _session(web_server, role_users["operator"])
    before = _fingerprint()

    def create(config, name="walk-named"):
        body = {"name": name, "kind": "files", "config": config}
        return _send(admin, web_server, "POST", "/api/v1/connectors/", json=body)

    # variables: Tidemark's own settings can never be named
    for config, field in (
        ({"path": "s3://bucket/in/", "key_env": "SECRET_KEY"}, "config.key_env"),
        ({"path": "s3://bucket/in/", "secret_env": "DATABASE_URL"}, "config.secret_env"),
    ):
        refused = create(config)
        assert refused.status_code == 400, (config, refused.text)
        assert "TIDEMARK_CREDENTIALS" in str(refused.json()[field])
    job = {"name": "walk-named-job", "connector": world["connector"].name, "batch_weight": 10}
    refused = _send(
        admin,
        web_server,
        "POST",
        "/api/v1/jobs/",
        json={**job, "sink": {"kind": "postgres", "dsn_env": "REDIS_URL", "table": "t"}},
    )
    assert refused.status_code == 400 and "sink.dsn_env" in refused.json(), refused.text

    # hosts: an endpoint the deployment does not list (loopback 127.0.0.2 is not 127.0.0.1)
    listener = Listener(host="127.0.0.2")
    try:
        refused = create(
            {
                "path": "s3://bucket/in/",
                "endpoint_url": listener.url,
                "key_env": "TM_TEST_DATABASE_URL",
                "secret_env": "TM_TEST_DATABASE_URL",
            }
        )
        assert refused.status_code == 400, refused.text
        assert "TIDEMARK_ALLOWED_ENDPOINTS" in str(refused.json()["config.endpoint_url"])
        assert listener.connections == 0 and not listener.received
    finally:
        listener.close()

    # paths: outside the roots, through .., through a symlink, as a sink, as an asset
    escape = tmp_path / "escape"
    escape.symlink_to("/etc")
    for path in ("/etc", "/proc/self", f"{tmp_path}/../../../../etc", str(escape)):
        refused = create({"path": path})
        assert refused.status_code == 400, (path, refused.text)
        assert "config.path" in refused.json(), path
    refused = _send(
        admin,
        web_server,
        "POST",
        "/api/v1/jobs/",
        json={**job, "sink": {"kind": "files", "path": "/etc/cron.d"}},
    )
    assert refused.status_code == 400 and "sink.path" in refused.json(), refused.text
    for location in ("/etc/passwd", "../../../etc/shadow", "file:///etc/passwd"):
        refused = _send(
            operator,
            web_server,
            "POST",
            f"/api/v1/connectors/{world['connector'].name}/assets/",
            json={"assets": [{"location": location, "weight": 1}]},
        )
        assert refused.status_code == 400, (location, refused.text)

    # NUL bytes: a 400 naming the parameter in the API, a normal page on the dashboard
    api = _send(admin, web_server, "GET", "/api/v1/connectors/?name=%00")
    assert api.status_code == 400 and "name" in api.json(), api.text
    page = admin.get(f"{web_server.url}/connectors/?q=%00", timeout=TIMEOUT)
    assert page.status_code == 200
    assert _fingerprint() == before


def test_the_engines_edges_are_refused_over_http(web_server, world, role_users):
    """Issue 42 (items 4, 8, 9 and the bodies and headers): a cron celery beat cannot compute,
    hosts with a fullwidth '@' or userinfo, bodies that are not JSON, guessed /metrics bearers;
    and every page carries the Content-Security-Policy."""
    admin = _session(web_server, role_users["admin"])
    operator = _session(web_server, role_users["operator"])
    before = _fingerprint()
    job = {"name": "walk-edge", "connector": world["connector"].name, "batch_weight": 10}

    for cron in ("0 0 31 2 *", "0 0 30 2 *", "0 0 31 4 *"):
        refused = _send(
            admin, web_server, "POST", "/api/v1/jobs/", json={**job, "schedule_cron": cron}
        )
        assert refused.status_code == 400 and "schedule_cron" in refused.json(), refused.text
        refused = _send(
            admin,
            web_server,
            "PATCH",
            f"/api/v1/jobs/{world['job'].name}/",
            json={"schedule_cron": cron},
        )
        assert refused.status_code == 400 and "schedule_cron" in refused.json(), refused.text

    for host in ("127.0.0.1\uff20evil", "user:pw@127.0.0.1", "b\u00fccher.example"):
        for config, field in (
            (
                {"path": "s3://bucket/in/", "endpoint_url": f"http://{host}:9000"},
                "config.endpoint_url",
            ),
            ({"path": f"s3://{host}/in/"}, "config.path"),
            ({"path": f"http://{host}/in/"}, "config.path"),
        ):
            body = {"name": "walk-host", "kind": "files", "config": config}
            refused = _send(admin, web_server, "POST", "/api/v1/connectors/", json=body)
            assert refused.status_code == 400 and field in refused.json(), (config, refused.text)
        sink = {"kind": "files", "path": f"s3://{host}/out/"}
        refused = _send(admin, web_server, "POST", "/api/v1/jobs/", json={**job, "sink": sink})
        assert refused.status_code == 400, refused.text
        refused = _send(
            operator,
            web_server,
            "POST",
            f"/api/v1/connectors/{world['connector'].name}/assets/",
            json={"assets": [{"location": f"s3://{host}/x.parquet"}]},
        )
        assert refused.status_code == 400, refused.text

    # bodies that are not JSON: 415, not a job without its sink
    headers = {"Referer": f"{web_server.url}/", "X-CSRFToken": admin.cookies["csrftoken"]}
    for kwargs in (
        {"data": {**job, "sink": "x", "params": "y"}},
        {"files": {"sink": ("sink.json", b'{"kind": "files"}')}, "data": job},
    ):
        refused = admin.post(
            f"{web_server.url}/api/v1/jobs/", headers=headers, timeout=TIMEOUT, **kwargs
        )
        assert refused.status_code == 415, refused.text
        assert "JSON" in refused.json()["detail"]

    # /metrics bearer guesses: counted with bad tokens, then 429 for any bearer
    try:
        guesses = [
            requests.get(
                f"{web_server.url}/metrics",
                headers={"Authorization": f"Bearer guess-{n}"},
                timeout=TIMEOUT,
            ).status_code
            for n in range(21)
        ]
        assert set(guesses[:20]) == {401} and guesses[20] == 429, guesses
    finally:
        token_failures_reset("127.0.0.1")

    # the Content-Security-Policy on pages
    for path in ("/accounts/login/", "/", "/admin/", "/api/docs/"):
        page = admin.get(f"{web_server.url}{path}", timeout=TIMEOUT)
        assert page.status_code == 200, path
        policy = page.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy, path
        assert "unsafe-inline" not in policy.replace("style-src-attr 'unsafe-inline'", ""), path
    assert _fingerprint() == before


def test_password_guessing_is_locked_out(web_server, role_users, settings):
    user = role_users["operator"]
    user.set_password("the-right-one")
    user.save(update_fields=["password"])
    http = requests.Session()
    login = f"{web_server.url}/accounts/login/"

    def attempt(password):
        http.get(login, timeout=TIMEOUT)
        return http.post(
            login,
            data={
                "username": user.username,
                "password": password,
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
            },
            headers={"Referer": login},
            allow_redirects=False,
            timeout=TIMEOUT,
        )

    try:
        for index in range(settings.AXES_FAILURE_LIMIT):
            # the form again with its error; the failure that reaches the limit is answered 429
            assert attempt("wrong").status_code in (
                (200, 429) if index == settings.AXES_FAILURE_LIMIT - 1 else (200,)
            )
        locked = attempt("the-right-one")
        assert locked.status_code == 429
        assert "sessionid" not in http.cookies
    finally:
        AccessAttempt.objects.all().delete()  # the address is loopback: free it for other tests


def test_options_and_functions_the_engine_would_apply_are_refused_over_http(
    web_server, world, role_users, tmp_path
):
    """Issue 42: reader and sink options that reach Hadoop's or Spark's configuration, and a meta
    table whose view reaches a SECURITY DEFINER function through an operator, as an admin sends
    them to the running server."""
    admin = _session(web_server, role_users["admin"])
    before = _fingerprint()
    landing = tmp_path / "landing"
    landing.mkdir()
    for key in ("fs.defaultFS", "FS.defaultFS", "PATH", "spark.hadoop.fs.defaultFS", "he\u0430der"):
        config = {"path": str(landing), "format": "csv", "read_options": {key: "viewfs://x/"}}
        body = {"name": "walk-options", "kind": "files", "config": config}
        refused = _send(admin, web_server, "POST", "/api/v1/connectors/", json=body)
        assert refused.status_code == 400, (key, refused.text)
        assert f"config.read_options.{key}" in refused.json(), (key, refused.text)
    for options in ({"fs.defaultFS": "webhdfs://127.0.0.2/"}, {"compression": "a.b.Codec"}):
        sink = {"kind": "files", "path": str(tmp_path / "out"), "options": options}
        body = {"name": "walk-sink", "connector": world["connector"].name, "batch_weight": 10}
        refused = _send(admin, web_server, "POST", "/api/v1/jobs/", json={**body, "sink": sink})
        assert refused.status_code == 400, refused.text
        assert f"sink.options.{next(iter(options))}" in refused.json(), refused.text
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION walk_op(bigint, bigint) RETURNS text LANGUAGE sql SECURITY DEFINER "
            "AS $$ SELECT string_agg(key, ',') FROM authtoken_token $$;"
            "CREATE OPERATOR #^# (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = walk_op);"
            "CREATE TABLE walk_base (uid bigint PRIMARY KEY, item text, weight bigint);"
            "CREATE VIEW walk_op_meta AS SELECT uid, uid #^# uid AS item, weight FROM walk_base;"
            "GRANT SELECT ON walk_base, walk_op_meta TO tidemark_reader;"
        )
    body = {
        "name": "walk-op-meta",
        "kind": "files",
        "config": {"meta_table": {"table": "walk_op_meta", "visibility": "none"}},
    }
    refused = _send(admin, web_server, "POST", "/api/v1/connectors/", json=body)
    assert refused.status_code == 400, refused.text
    assert "walk_op" in str(refused.json()["config.meta_table.table"])
    assert _fingerprint() == before
