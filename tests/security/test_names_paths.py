"""Issue 17, items 3 and 4: paths a hostile operator or admin names stay under
TIDEMARK_ALLOWED_ROOTS (after `..` and symlinks), assets stay inside their connector, and the
directory walk neither leaves its root nor loops (docs/security.md)."""

import os

import pytest

from inventory.models import Asset, BatchStatus, Connector, Job
from inventory.services import lifecycle
from inventory.services.errors import InvalidInput
from inventory.sources import files
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory, execute_refused_before_spark, make_job

pytestmark = pytest.mark.django_db


def _create(api, config, name="hostile"):
    return api.post(
        "/api/v1/connectors/", {"name": name, "kind": "files", "config": config}, format="json"
    )


def test_files_connectors_outside_the_allowed_roots_are_refused(role_users, tmp_path):
    api = token_client(role_users["admin"])
    escape = tmp_path / "landing-link"
    escape.symlink_to("/etc")
    hostile = [
        ("/etc", "TIDEMARK_ALLOWED_ROOTS"),
        ("/root", "TIDEMARK_ALLOWED_ROOTS"),
        ("/proc/self", "TIDEMARK_ALLOWED_ROOTS"),
        (f"{tmp_path}/../../../../../../etc", "TIDEMARK_ALLOWED_ROOTS"),
        (str(escape), "TIDEMARK_ALLOWED_ROOTS"),
        (f"file://{tmp_path}", "file://"),
    ]
    for path, reason in hostile:
        refused = _create(api, {"path": path})
        assert refused.status_code == 400, (path, refused.content)
        assert reason in refused.json()["config.path"][0], path
    assert not Connector.objects.filter(name="hostile").exists()
    assert _create(api, {"path": str(tmp_path)}).status_code == 201


def test_object_store_urls_that_reach_local_files_are_refused(role_users, tmp_path):
    api = token_client(role_users["admin"])
    for path in ["local:///etc/", f"simplecache::file://{tmp_path}", "zip://x::/tmp/a.zip"]:
        refused = _create(api, {"path": path})
        assert refused.status_code == 400, (path, refused.content)
        assert "config.path" in refused.json()


@pytest.mark.parametrize("kind", ["files", "delta"])
def test_files_and_delta_sinks_outside_the_allowed_roots_are_refused(role_users, tmp_path, kind):
    api = token_client(role_users["admin"])
    connector = ConnectorFactory(name="plain")
    for path in ["/etc/cron.d", f"{tmp_path}/../../../../../etc/cron.d", "file:///etc/cron.d"]:
        refused = api.post(
            "/api/v1/jobs/",
            {
                "name": "hostile-job",
                "connector": connector.name,
                "batch_weight": 10,
                "sink": {"kind": kind, "path": path},
            },
            format="json",
        )
        assert refused.status_code == 400, (path, refused.content)
        assert "sink.path" in refused.json(), refused.json()
    assert not Job.objects.filter(name="hostile-job").exists()


@pytest.mark.parametrize("kind", ["files", "delta"])
def test_a_sink_inside_its_own_connectors_directory_is_refused(role_users, tmp_path, kind):
    """A bare pattern ("*.json") matches at any depth: output written below the connector's
    directory would be discovered as new input, and every run would read its own output back."""
    api = token_client(role_users["admin"])
    landing = tmp_path / "landing"
    landing.mkdir()
    assert _create(api, {"path": str(landing)}, name="landing").status_code == 201

    def job(path, name="loop"):
        body = {"name": name, "connector": "landing", "batch_weight": 10}
        body["sink"] = {"kind": kind, "path": str(path)}
        return api.post("/api/v1/jobs/", body, format="json")

    for path in [landing, landing / "out", f"{tmp_path}/x/../landing/out"]:
        refused = job(path)
        assert refused.status_code == 400, (path, refused.content)
        assert "connector landing" in refused.json()["sink.path"][0], refused.json()
    assert not Job.objects.filter(name="loop").exists()

    assert job(tmp_path / "out", name="beside").status_code == 201
    moved = api.patch(
        "/api/v1/jobs/beside/", {"sink": {"kind": kind, "path": str(landing / "o")}}, format="json"
    )
    assert moved.status_code == 400, moved.content
    assert "sink.path" in moved.json()

    # a reset may not move the connector's directory over an existing job's sink either
    reset = api.post(
        "/api/v1/connectors/landing/reset/",
        {"config": {"path": str(tmp_path)}, "reason": "re-point"},
        format="json",
    )
    assert reset.status_code == 400, reset.content
    assert "beside" in reset.json()["config.path"][0]


def test_assets_register_only_inside_their_connector(role_users, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "ok.parquet").write_bytes(b"x")
    (landing / "out").symlink_to("/etc")
    local = ConnectorFactory(name="local", config={"path": str(landing)})
    bucket = ConnectorFactory(name="bucket", config={"path": "s3://bucket/in/"})
    operator = token_client(role_users["operator"])
    hostile = {
        local: [
            "/etc/passwd",
            "../../../etc/shadow",
            f"{landing}/../../../../../../etc/passwd",
            "/proc/self/environ",
            "out/passwd",
            f"file://{landing}/ok.parquet",
            "s3://bucket/in/a.parquet",
            str(tmp_path / "beside.parquet"),
        ],
        bucket: [
            "s3://bucket/other/a.parquet",
            "s3://elsewhere/in/a.parquet",
            "s3://bucket/in/../secrets/a.parquet",
            "/etc/passwd",
        ],
    }
    for connector, locations in hostile.items():
        for location in locations:
            refused = operator.post(
                f"/api/v1/connectors/{connector.name}/assets/",
                {"assets": [{"location": location}]},
                format="json",
            )
            assert refused.status_code == 400, (location, refused.content)
            assert "assets[0].location" in refused.json(), location
    assert not Asset.objects.exists()
    for connector, location in [(local, "ok.parquet"), (bucket, "s3://bucket/in/2026/a.parquet")]:
        accepted = operator.post(
            f"/api/v1/connectors/{connector.name}/assets/",
            {"assets": [{"location": location}]},
            format="json",
        )
        assert accepted.status_code == 200, accepted.content


@pytest.mark.django_db(transaction=True)
def test_a_stored_asset_outside_its_connector_is_never_read(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    connector = ConnectorFactory(name="stored", config={"path": str(landing)})
    Asset.objects.create(connector=connector, location="/etc/passwd", weight=1)
    job = make_job(
        connector=connector, batch_weight=100, sink={"kind": "files", "path": str(tmp_path / "o")}
    )
    (batch,) = lifecycle.batches_plan(job=job, limit=1)

    stored = execute_refused_before_spark(batch)
    assert stored.status in (BatchStatus.FAILED, BatchStatus.DEAD)
    assert "TIDEMARK_ALLOWED_ROOTS" in stored.error["message"]
    assert "root:" not in str(stored.error)


def test_a_stored_job_whose_sink_lies_in_its_connectors_directory_fails_before_spark(tmp_path):
    """A job saved before the rule (or by a write around the service) fails its batch naming the
    reason, instead of writing output its connector discovers again."""
    landing = tmp_path / "landing"
    landing.mkdir()
    connector = ConnectorFactory(name="stored-loop", config={"path": str(landing)})
    Asset.objects.create(connector=connector, location=str(landing / "a.parquet"), weight=1)
    job = make_job(
        connector=connector, batch_weight=100, sink={"kind": "files", "path": str(tmp_path / "o")}
    )
    Job.objects.filter(pk=job.pk).update(sink={"kind": "files", "path": str(landing / "out")})
    (batch,) = lifecycle.batches_plan(job=Job.objects.get(pk=job.pk), limit=1)

    stored = execute_refused_before_spark(batch)
    assert stored.status in (BatchStatus.FAILED, BatchStatus.DEAD)
    assert "connector stored-loop" in stored.error["message"], stored.error


def _files(directory, names):
    for name in names:
        (directory / name).write_bytes(b"PAR1")
        os.utime(directory / name, (1_000_000_000, 1_000_000_000))


def test_discovery_never_follows_a_symlink_loop_or_leaves_its_root(tmp_path):
    landing = tmp_path / "landing"
    (landing / "sub").mkdir(parents=True)
    _files(landing, ["a.parquet"])
    _files(landing / "sub", ["b.parquet"])
    (landing / "loop-1").symlink_to(".")
    (landing / "loop-2").symlink_to(".")
    (landing / "sub" / "up").symlink_to("..")
    (landing / "parent").symlink_to(tmp_path)
    (landing / "etc").symlink_to("/etc")
    (landing / "passwd.parquet").symlink_to("/etc/passwd")
    connector = ConnectorFactory(name="loops", config={"path": str(landing), "settle_seconds": 0})
    registered = files.directory_discover(connector=connector)
    locations = sorted(Asset.objects.filter(connector=connector).values_list("location", flat=True))
    assert locations == [str(landing / "a.parquet"), str(landing / "sub" / "b.parquet")]
    assert registered == 2


def test_tidemarks_own_database_and_broker_files_are_never_a_source_or_sink(
    role_users, tmp_path, settings
):
    """The embedded PostgreSQL's and Redis's directories lie in the data folder, the default
    allowed root: a files connector over them read the raw tables (tokens, password hashes), a
    files sink wrote into them (invariant 10)."""
    data = tmp_path / "data"
    own = [data / "pg", data / "redis"]
    settings.TIDEMARK_OWN_DIRECTORIES = [str(d) for d in own]
    for directory in own:
        (directory / "base").mkdir(parents=True)
        _files(directory / "base", ["16384"])
    (data / "landing").mkdir()
    _files(data / "landing", ["a.json"])
    (data / "landing" / "tables").symlink_to(own[0])
    api = token_client(role_users["admin"])
    for path in [own[0], own[0] / "base", own[1]]:
        refused = _create(api, {"path": str(path)})
        assert refused.status_code == 400, (path, refused.content)
        assert "Tidemark's own" in refused.json()["config.path"][0]

    connector = ConnectorFactory(
        name="data", config={"path": str(data), "patterns": ["*"], "settle_seconds": 0}
    )
    files.directory_discover(connector=connector)
    locations = list(Asset.objects.filter(connector=connector).values_list("location", flat=True))
    assert locations == [str(data / "landing" / "a.json")]

    job = api.post(
        "/api/v1/jobs/",
        {
            "name": "into-pg",
            "connector": "data",
            "batch_weight": 10,
            "sink": {"kind": "files", "path": str(own[0] / "base" / "out")},
        },
        format="json",
    )
    assert job.status_code == 400, job.content
    assert "Tidemark's own" in job.json()["sink.path"][0]


def test_the_walk_stops_with_an_error_past_its_budgets(tmp_path, settings):
    deep = tmp_path / "deep"
    nested = deep / "1" / "2" / "3" / "4"
    nested.mkdir(parents=True)
    _files(nested, ["a.parquet"])
    connector = ConnectorFactory(name="deep", config={"path": str(deep), "settle_seconds": 0})
    settings.TIDEMARK_WALK_MAX_DEPTH = 3
    with pytest.raises(InvalidInput, match="TIDEMARK_WALK_MAX_DEPTH") as refused:
        files.directory_discover(connector=connector)
    assert refused.value.field == "config.path"

    wide = tmp_path / "wide"
    wide.mkdir()
    _files(wide, [f"f{n}.parquet" for n in range(20)])
    settings.TIDEMARK_WALK_MAX_DEPTH = 32
    settings.TIDEMARK_WALK_MAX_ENTRIES = 10
    connector = ConnectorFactory(name="wide", config={"path": str(wide), "settle_seconds": 0})
    with pytest.raises(InvalidInput, match="TIDEMARK_WALK_MAX_ENTRIES"):
        files.directory_discover(connector=connector)
    assert not Asset.objects.filter(connector__name__in=["deep", "wide"]).exists()


def test_an_upstream_commit_reported_at_a_path_outside_the_roots_is_never_read(tmp_path):
    """An external processor reports its output location through succeed/; a job reading that
    job's output must not read a location outside the allowed roots (`/etc`)."""
    from tests.support.job_chain import commit, downstream_job, upstream_job

    up = upstream_job(tmp_path, "reported", items=1)
    taken = lifecycle.batch_acquire(job=up, worker="external")
    commit(taken, {"rows_out": 3, "location": "/etc"})
    down = downstream_job("reads-reported", up, {"kind": "files", "path": str(tmp_path / "d")})
    (batch,) = lifecycle.batches_plan(job=down, limit=1)

    stored = execute_refused_before_spark(batch)
    assert stored.status in (BatchStatus.FAILED, BatchStatus.DEAD)
    assert "TIDEMARK_ALLOWED_ROOTS" in stored.error["message"]
