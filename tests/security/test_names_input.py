"""Issue 17, items 8 and 9: every configured credential's value is redacted from what is stored or
shown (not only the job's own variables), and bad input (NUL bytes, over-long values, malformed
JSON) is a 400 naming the field on the API, a normal page on the dashboard, never a 500."""

import json
import logging

import pytest

from inventory.models import Batch, BatchStatus
from inventory.services.assets import assets_register
from inventory.services.secrets import RedactingFilter
from tests.support.api_support import session_client, token_client
from tests.support.factories import ConnectorFactory, make_job

pytestmark = pytest.mark.django_db

OTHER_SECRET = "other-secret-value-93b1d7"


@pytest.fixture
def other_secret(monkeypatch):
    # a credential the deployment offers (TM_* in the tests' TIDEMARK_CREDENTIALS) that the job
    # below never names
    monkeypatch.setenv("TM_OTHER_WAREHOUSE_PASSWORD", OTHER_SECRET)


def _taken(role_users, tmp_path):
    connector = ConnectorFactory(config={"path": str(tmp_path)})
    from inventory.services.assets import assets_register

    assets_register(connector=connector, items=[(str(tmp_path / "a.csv"), 1, {})])
    job = make_job(connector=connector, name="ext")
    api = token_client(role_users["operator"])
    return api, api.post(f"/api/v1/jobs/{job.name}/acquire/", {}, format="json").json()


def test_another_configured_secret_is_redacted_from_a_reported_error(
    role_users, tmp_path, other_secret
):
    api, taken = _taken(role_users, tmp_path)
    response = api.post(
        f"/api/v1/batches/{taken['id']}/fail/",
        {
            "attempt": taken["attempt"],
            "error": {"type": "Leak", "message": f"cat /etc/app.env: PW={OTHER_SECRET} failed"},
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    assert OTHER_SECRET not in response.content.decode()
    stored = Batch.objects.get(pk=taken["id"]).error
    assert "failed" in stored["message"] and OTHER_SECRET not in repr(stored)
    page = session_client(role_users["viewer"]).get(f"/batches/{taken['id']}/")
    assert page.status_code == 200 and OTHER_SECRET not in page.content.decode()


def test_another_configured_secret_is_redacted_from_a_reported_result(
    role_users, tmp_path, other_secret
):
    api, taken = _taken(role_users, tmp_path)
    response = api.post(
        f"/api/v1/batches/{taken['id']}/succeed/",
        {"attempt": taken["attempt"], "result": {"rows_out": 3, "note": f"pw {OTHER_SECRET}"}},
        format="json",
    )
    assert response.status_code == 200, response.content
    stored = Batch.objects.get(pk=taken["id"]).result
    assert stored["rows_out"] == 3 and OTHER_SECRET not in repr(stored)


def test_configured_secrets_never_reach_a_log_line(other_secret):
    record = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "connect failed with %s", (OTHER_SECRET,), None
    )
    assert RedactingFilter().filter(record)
    assert OTHER_SECRET not in record.getMessage() and "connect failed" in record.getMessage()


def test_nul_in_a_dashboard_search_is_a_normal_page(role_users):
    ConnectorFactory(name="landing")
    client = session_client(role_users["viewer"])
    for url in ["/connectors/?q=%00", "/connectors/?q=land%00ing", "/?q=%00", "/connectors/?%00=x"]:
        response = client.get(url)
        assert response.status_code == 200, url


def test_nul_anywhere_in_the_api_is_a_400_naming_the_field(role_users, tmp_path):
    admin = token_client(role_users["admin"])
    assert admin.get("/api/v1/connectors/?name=%00").status_code == 400
    assert "name" in admin.get("/api/v1/connectors/?name=%00").json()
    assert admin.get("/api/v1/connectors/%00/").status_code == 404
    for body, field in [
        ({"name": "a\x00b", "kind": "files", "config": {"path": str(tmp_path)}}, "name"),
        ({"name": "nul", "kind": "files", "config": {"path": f"{tmp_path}\x00"}}, "config.path"),
        ({"name": "nul", "kind": "files", "config": {"path": str(tmp_path), "k\x00": 1}}, None),
        ({"name": "nul", "kind": "files", "labels": ["x\x00"], "config": {}}, "labels[0]"),
    ]:
        response = admin.post("/api/v1/connectors/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        if field:
            assert field in response.json(), response.json()
    connector = ConnectorFactory(name="plain")
    job = admin.post(
        "/api/v1/jobs/",
        {"name": "j", "connector": connector.name, "batch_weight": 10, "params": {"x": "\x00"}},
        format="json",
    )
    assert job.status_code == 400 and "params.x" in job.json(), job.content


def test_over_long_values_and_malformed_json_are_400s(role_users, tmp_path):
    admin = token_client(role_users["admin"])
    too_long = admin.post(
        "/api/v1/connectors/",
        {"name": "n" * 5000, "kind": "files", "config": {"path": str(tmp_path)}},
        format="json",
    )
    assert too_long.status_code == 400 and "name" in too_long.json()
    assert admin.get("/api/v1/connectors/?name=" + "n" * 5000).status_code in (200, 400)
    malformed = admin.post(
        "/api/v1/connectors/", '{"name": "x", "config": {', content_type="application/json"
    )
    assert malformed.status_code == 400
    for field, value in [("config", "not an object"), ("labels", {"a": 1}), ("kind", ["files"])]:
        body = {"name": "shape", "kind": "files", "config": {"path": str(tmp_path)}, field: value}
        response = admin.post(
            "/api/v1/connectors/", json.dumps(body), content_type="application/json"
        )
        assert response.status_code == 400, (field, response.content)
        assert field in response.json(), (field, response.json())


def test_lone_surrogates_in_the_api_are_a_400_naming_the_field(role_users, tmp_path):
    # "\ud800" is valid JSON text but no Unicode character: it cannot be encoded to UTF-8, so
    # PostgreSQL refuses it and a file path holding it cannot be resolved (this was a 500 at
    # assets/, and elsewhere a 400 naming no field, from the database's "invalid input syntax")
    admin = token_client(role_users["admin"])
    connector = ConnectorFactory(name="plain", config={"path": str(tmp_path)})
    job = make_job(connector=connector, name="j")
    for method, url, raw, field in [
        (
            "post",
            "/api/v1/connectors/plain/assets/",
            '{"assets": [{"location": "a\\ud800"}]}',
            "assets[0].location",
        ),
        ("patch", "/api/v1/jobs/j/", '{"params": {"x": "\\ud800"}}', "params.x"),
        ("patch", "/api/v1/jobs/j/", '{"params": {"\\udc00": 1}}', "params.\\udc00"),
        (
            "patch",
            "/api/v1/connectors/plain/",
            f'{{"config": {{"path": "{tmp_path}", "read_options": {{"a": ["\\ud800"]}}}}}}',
            "config.read_options.a[0]",
        ),
    ]:
        response = getattr(admin, method)(url, raw, content_type="application/json")
        assert response.status_code == 400, (url, response.content)
        assert field in response.json(), (url, response.json())
    assert Batch.objects.filter(job=job).count() == 0
    assert connector.assets.count() == 0


def test_a_number_too_large_to_store_is_a_400_naming_the_field(role_users, tmp_path):
    # `1e999` is valid JSON text; Python reads it as infinity, which jsonb cannot hold: it was a
    # 400 naming no field, from the database's "invalid input syntax for type json"
    operator = token_client(role_users["operator"])
    connector = ConnectorFactory(name="plain", config={"path": str(tmp_path)})
    assets_register(connector=connector, items=[(str(tmp_path / "a.csv"), 1, {})])
    job = make_job(connector=connector, name="j")
    taken = operator.post("/api/v1/jobs/j/acquire/", {}, format="json").json()
    for url, raw, field in [
        (
            f"/api/v1/batches/{taken['id']}/succeed/",
            f'{{"attempt": {taken["attempt"]}, "result": {{"x": 1e999}}}}',
            "result.x",
        ),
        (
            "/api/v1/jobs/j/succeed-batches/",
            f'{{"batches": [{{"id": {taken["id"]}, "attempt": 1, "result": {{"x": -1e999}}}}]}}',
            "batches[0].result.x",
        ),
        (f"/api/v1/batches/{taken['id']}/fail/", '{"attempt": 1, "error": 1e999}', "error"),
    ]:
        response = operator.post(url, raw, content_type="application/json")
        assert response.status_code == 400, (url, response.content)
        assert field in response.json(), (url, response.json())
    assert Batch.objects.get(job=job).status == BatchStatus.RUNNING


def test_json_nested_too_deeply_is_a_400_and_stores_nothing(role_users):
    # 900 levels of params were saved, and then every read of the job (its page in the API, the
    # jobs list, `tidemark jobs`) was a 500: masking the params recursed past Python's limit;
    # deeper documents were a 500 already in the parser
    admin = token_client(role_users["admin"])
    connector = ConnectorFactory(name="plain")
    job = make_job(connector=connector, name="j")
    # refused before it is parsed (the parser recursed once per level: a RecursionError, which
    # in CPython 3.11 left the process's `ast` module broken, gh-106905)
    for levels in (65, 200, 900):
        deep = '{"params": {"a": ' + "[" * levels + "]" * levels + "}}"
        response = admin.patch("/api/v1/jobs/j/", deep, content_type="application/json")
        assert response.status_code == 400, response.content[:300]
        assert "nested deeper than 64 levels" in response.json()["detail"]
    # 64 levels in all (the body's object, params, then 62 arrays) are inside the bound
    fits = '{"params": {"a": ' + "[" * 62 + "]" * 62 + "}}"
    assert admin.patch("/api/v1/jobs/j/", fits, content_type="application/json").status_code == 200
    # brackets inside strings are text, not nesting
    text = {"params": {"note": "[" * 500 + "{" * 500 + '\\"['}}
    assert admin.patch("/api/v1/jobs/j/", text, format="json").status_code == 200
    assert admin.patch("/api/v1/jobs/j/", {"params": {}}, format="json").status_code == 200
    job.refresh_from_db()
    assert job.params == {}
    assert admin.get("/api/v1/jobs/").status_code == 200
    for body in ("[" * 100_000, '{"reason": ' + "[" * 600 + "]" * 600 + "}"):
        response = admin.post("/api/v1/jobs/j/watermark/", body, content_type="application/json")
        assert response.status_code == 400, response.content[:300]
    # what configs really hold stays well inside the limit
    nested = {"a": {"b": {"c": {"d": [[{"e": 1}]]}}}}
    ok = admin.patch("/api/v1/jobs/j/", {"params": nested}, format="json")
    assert ok.status_code in (200, 400), ok.content
    assert "nested" not in ok.content.decode()


def test_a_config_nested_too_deeply_is_refused_from_every_front():
    # the dashboard and the admin save through the same check as the API's services
    from inventory.services.errors import InvalidInput
    from inventory.services.secrets import check_no_secrets

    deep = {"a": []}
    inner = deep["a"]
    for _ in range(200):
        inner.append([])
        inner = inner[0]
    with pytest.raises(InvalidInput) as refused:
        check_no_secrets(deep, "params")
    assert refused.value.field.startswith("params.a[0][0]")
    check_no_secrets({"a": {"b": [[{"c": 1}]]}}, "params")


def test_a_config_nested_too_deeply_stored_before_the_rule_is_shown_cut_off(role_users):
    # stored before the rule (or by a direct write): its job must still be readable, to fix it
    connector = ConnectorFactory(name="plain")
    deep = '{"a": ' + "[" * 600 + "]" * 600 + "}"
    job = make_job(connector=connector, name="j")
    type(job).objects.filter(pk=job.pk).update(params=json.loads(deep))
    viewer = token_client(role_users["viewer"])
    listed = viewer.get("/api/v1/jobs/")
    assert listed.status_code == 200, listed.content[:300]
    shown = viewer.get("/api/v1/jobs/j/").json()["params"]
    depth = 0
    while isinstance(shown, dict | list):
        shown = shown["a"] if isinstance(shown, dict) else shown[0]
        depth += 1
    assert shown == "********" and depth <= 64
