"""Issue 17, items 1 and 8: what a hostile operator or admin may *name* as a credential, and where
a credential may go (docs/security.md).

Variables: only those in TIDEMARK_CREDENTIALS, never Tidemark's own. Endpoints: a credential
goes only to TIDEMARK_ALLOWED_ENDPOINTS (or a kind's public default), checked before any
connection. A plain listener on loopback proves that no credential value reaches a host that is
not allowed, on the validation path (a connector or job saved over the API) and on the run path
(a config stored before the rules, run by the worker's code)."""

import pytest

from inventory.models import Batch, BatchStatus, Connector, Job
from inventory.services import lifecycle as batches
from inventory.services.assets import assets_register
from tests.api_support import token_client
from tests.factories import ConnectorFactory, make_job
from tests.listener import Listener
from workers import execution

CANARY_KEY = "AKIACANARYKEY0001"
CANARY_TOKEN = "canary-session-token-7f3e9a"
CANARY_PASSWORD = "canary-db-password-51c2"


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def canaries(monkeypatch):
    monkeypatch.setenv("TM_CANARY_KEY", CANARY_KEY)
    monkeypatch.setenv("TM_CANARY_SECRET", "canary-secret-value-0c1d")
    monkeypatch.setenv("TM_CANARY_TOKEN", CANARY_TOKEN)


def _s3(endpoint: str, **names) -> dict:
    return {
        "path": "s3://bucket/in/",
        "endpoint_url": endpoint,
        "key_env": names.get("key_env", "TM_CANARY_KEY"),
        "secret_env": names.get("secret_env", "TM_CANARY_SECRET"),
        "session_token_env": names.get("session_token_env", "TM_CANARY_TOKEN"),
    }


def _create(api, kind: str, config: dict, name: str = "hostile"):
    return api.post(
        "/api/v1/connectors/", {"name": name, "kind": kind, "config": config}, format="json"
    )


# ---- variables ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "METRICS_TOKEN",
        "TIDEMARK_FENCE_DSN",
        "DJANGO_SETTINGS_MODULE",
        "CELERY_QUEUE",
        "SPARK_CONF",
        "API_RATE_READ",
    ],
)
def test_tidemarks_own_settings_can_never_be_named_even_when_listed(role_users, settings, name):
    settings.TIDEMARK_CREDENTIALS = [name, "*"]
    api = token_client(role_users["admin"])
    refused = _create(api, "files", _s3("https://s3.amazonaws.com", session_token_env=name))
    assert refused.status_code == 400, refused.content
    message = refused.json()["config.session_token_env"][0]
    assert "Tidemark's own configuration" in message and "TIDEMARK_CREDENTIALS" in message
    assert not Connector.objects.filter(name="hostile").exists()


@pytest.mark.django_db
def test_a_variable_not_listed_is_refused_naming_the_setting(role_users, canaries):
    api = token_client(role_users["admin"])
    for config, field in [
        ({"path": "/x", "token_env": "HOME"}, "config.token_env"),
        ({"dsn_env": "PATH", "table": "t", "column": "id"}, "config.dsn_env"),
    ]:
        kind = "table" if "dsn_env" in config else "files"
        refused = _create(api, kind, config)
        assert refused.status_code == 400, refused.content
        assert "TIDEMARK_CREDENTIALS" in refused.json()[field][0]
    connector = ConnectorFactory(name="plain")
    for body, field in [
        (
            {"sink": {"kind": "postgres", "table": "t", "key": ["id"], "dsn_env": "HOME"}},
            "sink.dsn_env",
        ),
        ({"params": {"api_token_env": "SECRET_KEY"}}, "params.api_token_env"),
    ]:
        refused = api.post(
            "/api/v1/jobs/",
            {"name": "hostile-job", "connector": connector.name, "batch_weight": 10, **body},
            format="json",
        )
        assert refused.status_code == 400, refused.content
        assert "TIDEMARK_CREDENTIALS" in refused.json()[field][0]
    assert not Job.objects.filter(name="hostile-job").exists()


# ---- endpoints: the validation path ------------------------------------------------------------


@pytest.mark.django_db
def test_validation_never_sends_a_credential_to_a_host_that_is_not_allowed(
    role_users, canaries, listener, settings
):
    api = token_client(role_users["admin"])
    settings.TIDEMARK_ALLOWED_ENDPOINTS = ["https://minio.internal:9000"]
    refused = _create(api, "files", _s3(listener.url))
    assert refused.status_code == 400, refused.content
    assert "TIDEMARK_ALLOWED_ENDPOINTS" in refused.json()["config.endpoint_url"][0]
    assert listener.connections == 0 and not listener.received

    # the same config at an allowed endpoint does send the token there: the listener would
    # have seen a leak
    settings.TIDEMARK_ALLOWED_ENDPOINTS = [listener.url]
    reached = _create(api, "files", _s3(listener.url))
    assert reached.status_code == 400  # the listener is no S3
    assert listener.saw(CANARY_TOKEN) and listener.saw(CANARY_KEY)


@pytest.mark.django_db
def test_dsns_and_brokers_with_credentials_go_only_to_allowed_hosts(
    role_users, monkeypatch, listener, settings
):
    settings.TIDEMARK_ALLOWED_ENDPOINTS = ["postgresql://db.internal", "kafka://broker.internal"]
    monkeypatch.setenv(
        "TM_CANARY_DSN", f"postgresql://app:{CANARY_PASSWORD}@127.0.0.1:{listener.port}/app"
    )
    monkeypatch.setenv("TM_CANARY_KV_DSN", f"host=127.0.0.1 port={listener.port} dbname=app")
    monkeypatch.setenv(
        "TM_CANARY_ADDR_DSN", f"host=db.internal hostaddr=127.0.0.1 port={listener.port} dbname=app"
    )
    monkeypatch.setenv("TM_CANARY_USER", "app")
    monkeypatch.setenv("TM_CANARY_PASS", CANARY_PASSWORD)
    api = token_client(role_users["admin"])
    for env in ("TM_CANARY_DSN", "TM_CANARY_KV_DSN", "TM_CANARY_ADDR_DSN"):
        table = _create(api, "table", {"dsn_env": env, "table": "orders", "column": "id"})
        assert table.status_code == 400, table.content
        assert "TIDEMARK_ALLOWED_ENDPOINTS" in table.json()["config.dsn_env"][0]
        remote_meta = _create(
            api,
            "files",
            {"dsn_env": env, "meta_table": {"table": "catalog", "uid_column": "uid"}},
        )
        assert remote_meta.status_code == 400, remote_meta.content
        assert "TIDEMARK_ALLOWED_ENDPOINTS" in remote_meta.json()["config.dsn_env"][0]
    kafka = _create(
        api,
        "kafka",
        {
            "bootstrap_servers": f"127.0.0.1:{listener.port}",
            "topic": "orders",
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_username_env": "TM_CANARY_USER",
            "sasl_password_env": "TM_CANARY_PASS",
        },
    )
    assert kafka.status_code == 400, kafka.content
    assert "TIDEMARK_ALLOWED_ENDPOINTS" in kafka.json()["config.bootstrap_servers"][0]
    connector = ConnectorFactory(name="plain")
    sink = api.post(
        "/api/v1/jobs/",
        {
            "name": "to-listener",
            "connector": connector.name,
            "batch_weight": 10,
            "sink": {"kind": "postgres", "dsn_env": "TM_CANARY_DSN", "table": "t", "key": ["id"]},
        },
        format="json",
    )
    assert sink.status_code == 400, sink.content
    assert "TIDEMARK_ALLOWED_ENDPOINTS" in sink.json()["sink.dsn_env"][0]
    assert listener.connections == 0 and not listener.received


# ---- the run path: configs stored before the rules ---------------------------------------------


def _stored_job(connector, sink):
    job = make_job(connector=connector, batch_weight=100, max_items=10, lease_seconds=30)
    Job.objects.filter(pk=job.pk).update(sink=sink)  # as stored before the rules existed
    (batch,) = batches.batches_plan(job=job, limit=1)
    return batch


def _never_called(name):
    def executor(spec, cancel):
        raise AssertionError("the Spark side must not be reached")

    return executor


@pytest.mark.django_db(transaction=True)
def test_a_stored_config_cannot_reach_a_host_or_variable_at_run_time(
    canaries, listener, settings, tmp_path, monkeypatch
):
    settings.TIDEMARK_ALLOWED_ENDPOINTS = []
    monkeypatch.setenv(
        "TM_CANARY_DSN", f"postgresql://app:{CANARY_PASSWORD}@127.0.0.1:{listener.port}/app"
    )
    object_store = ConnectorFactory(name="stored-s3", config=_s3(listener.url))
    assets_register(connector=object_store, items=[("s3://bucket/in/a.parquet", 1, {})])
    to_listener = _stored_job(object_store, {"kind": "files", "path": str(tmp_path / "out")})

    landing = tmp_path / "landing"
    landing.mkdir()
    local = ConnectorFactory(name="stored-local", config={"path": str(landing)})
    assets_register(connector=local, items=[(str(landing / "a.parquet"), 1, {})])
    to_sink = _stored_job(
        local, {"kind": "postgres", "dsn_env": "TM_CANARY_DSN", "table": "t", "key": ["id"]}
    )
    own_variable = _stored_job(
        local, {"kind": "postgres", "dsn_env": "SECRET_KEY", "table": "t", "key": ["id"]}
    )

    for batch, setting in [
        (to_listener, "TIDEMARK_ALLOWED_ENDPOINTS"),
        (to_sink, "TIDEMARK_ALLOWED_ENDPOINTS"),
        (own_variable, "TIDEMARK_CREDENTIALS"),
    ]:
        outcome = execution.batch_execute(
            batch_id=batch.pk, executor_for=_never_called, worker="w:1"
        )
        stored = Batch.objects.get(pk=batch.pk)
        assert stored.status in (BatchStatus.FAILED, BatchStatus.DEAD), outcome
        assert setting in stored.error["message"]
    # discovery of the stored object store is refused before it lists anything
    from inventory.services.discovery import discover

    with pytest.raises(Exception, match="TIDEMARK_ALLOWED_ENDPOINTS"):
        discover(Connector.objects.get(name="stored-s3"))
    assert listener.connections == 0 and not listener.received
