"""Reader and sink options never reach Hadoop's or Spark's configuration (issue 42, item 2).

A connector's `read_options` and a files sink's `options` became Spark DataSource options, which
Spark copies into the read's or write's Hadoop configuration: `fs.defaultFS=viewfs://...` with a
mount table mapped an allowed item onto any file, `fs.defaultFS=webhdfs://host/` made the worker
call any host. Only each format's allowlisted option names pass (workers/spark/options.py): a 400
naming the key when saved, a batch error before Spark for a value stored before the rule, and the
same on every reading path (files, meta tables, object stores, the CLI's local runner).
"""

import pytest
from django.db import connection

from inventory.models import BatchStatus, Connector, Job
from inventory.services import lifecycle
from tests.support.api_support import make_inventory, token_client
from tests.support.batch_specs import spec_for
from tests.support.cli_fixtures import one_line_error
from tests.support.factories import execute_refused_before_spark
from tests.support.s3_fixtures import KEY_ENV, SECRET_ENV
from workers.spark.errors import BatchError, ReadError
from workers.spark.run import run_batch

HADOOP_KEYS = (
    "fs.defaultFS",
    "FS.DEFAULTFS",
    "fs.viewfs.mounttable.default.link./in",
    "fs.webhdfs.impl",
    "hadoop.security.authentication",
    "mapreduce.input.fileinputformat.input.dir.recursive",
    "parquet.crypto.factory.class",
    "spark.sql.files.ignoreCorruptFiles",
    "path",
    "PATH",
    " header",
    "he\u0430der",  # a Cyrillic a
    "io.compression.codecs",
)


def _connector(api, name, config):
    return api.post(
        "/api/v1/connectors/", {"name": name, "kind": "files", "config": config}, format="json"
    )


@pytest.mark.django_db
@pytest.mark.parametrize("key", HADOOP_KEYS)
def test_a_reader_option_outside_the_allowlist_is_a_400_naming_the_key(role_users, key):
    from django.conf import settings

    api = token_client(role_users["admin"])
    landing = settings.DATA_DIR / "in"
    landing.mkdir(parents=True, exist_ok=True)
    config = {"path": str(landing), "format": "csv", "read_options": {key: "viewfs://x/"}}
    response = _connector(api, "hadoop-keys", config)
    assert response.status_code == 400, response.content
    reason = str(response.json()[f"config.read_options.{key}"])
    assert "is not a Spark csv reader option" in reason
    assert "sep" in reason and "header" in reason  # what is allowed instead
    assert not Connector.objects.filter(name="hadoop-keys").exists()


@pytest.mark.django_db
def test_allowlisted_reader_options_in_any_case_are_saved_and_values_are_checked(role_users):
    from django.conf import settings

    api = token_client(role_users["admin"])
    landing = settings.DATA_DIR / "in"
    landing.mkdir(parents=True, exist_ok=True)
    config = {"path": str(landing), "format": "csv", "read_options": {"HEADER": True, "sep": ";"}}
    assert _connector(api, "csv-options", config).status_code == 201
    bad_mode = {**config, "read_options": {"mode": "IGNORE_EVERYTHING"}}
    response = _connector(api, "csv-mode", bad_mode)
    assert response.status_code == 400
    assert "FAILFAST" in str(response.json()["config.read_options.mode"])
    # a format's option on another format's reader is refused as well
    response = _connector(api, "json-header", {**config, "format": "json"})
    assert response.status_code == 400
    assert "config.read_options.HEADER" in response.json()


@pytest.mark.django_db
def test_a_meta_table_connectors_read_options_are_held_to_the_same_allowlist(role_users):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE options_meta (uid bigint PRIMARY KEY, item text, weight bigint);"
            "GRANT SELECT ON options_meta TO tidemark_reader;"
        )
    api = token_client(role_users["admin"])
    config = {"meta_table": {"table": "options_meta"}, "read_options": {"fs.defaultFS": "x"}}
    response = _connector(api, "meta-options", config)
    assert response.status_code == 400, response.content
    assert "config.read_options.fs.defaultFS" in response.json()


@pytest.mark.django_db
def test_an_object_store_connectors_read_options_are_held_to_the_same_allowlist(
    role_users, s3_server, s3_bucket
):
    api = token_client(role_users["admin"])
    config = {
        "path": f"s3://{s3_bucket}/landing/",
        "endpoint_url": s3_server.endpoint_url,
        "region": "us-east-1",
        "key_env": KEY_ENV,
        "secret_env": SECRET_ENV,
        "read_options": {"fs.s3a.endpoint": "http://elsewhere"},
    }
    response = _connector(api, "store-options", config)
    assert response.status_code == 400, response.content
    assert "config.read_options.fs.s3a.endpoint" in response.json()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "options, field",
    [
        ({"parquet.crypto.factory.class": "x.Evil"}, "sink.options.parquet.crypto.factory.class"),
        ({"fs.defaultFS": "viewfs://x/"}, "sink.options.fs.defaultFS"),
        ({"Path": "/etc"}, "sink.options.Path"),
        ({"compression": "org.apache.hadoop.io.compress.GzipCodec"}, "sink.options.compression"),
        ({"mapreduce.output.basename": "x"}, "sink.options.mapreduce.output.basename"),
    ],
)
def test_a_sink_option_outside_the_allowlist_is_a_400_naming_the_key(role_users, options, field):
    from django.conf import settings

    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    sink = {"kind": "files", "path": str(settings.DATA_DIR / "out-options"), "options": options}
    body = {"name": "sink-options", "connector": connector.name, "batch_weight": 100, "sink": sink}
    response = api.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    sink["options"] = {"COMPRESSION": "gzip"}
    assert api.post("/api/v1/jobs/", body, format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_options_stored_before_the_rule_fail_the_batch_before_spark_and_viewers_see_why(
    role_users, tmp_path
):
    sink = {"kind": "files", "path": str(tmp_path / "out")}
    connector, job = make_inventory(name="stored-options", sink=sink)
    # stored past every API check (saved before the allowlist, or by hand in the database)
    Connector.objects.filter(pk=connector.pk).update(
        config={**connector.config, "read_options": {"fs.defaultFS": "viewfs://x/"}}
    )
    (batch,) = lifecycle.batches_plan(job=job, limit=1)
    batch = execute_refused_before_spark(batch)
    assert batch.status in (BatchStatus.FAILED, BatchStatus.DEAD)
    assert "read_options" in batch.error["message"]
    assert "'fs.defaultFS' is not a Spark parquet reader option" in batch.error["message"]
    shown = token_client(role_users["viewer"]).get(f"/api/v1/batches/{batch.pk}/")
    assert "is not a Spark parquet reader option" in shown.content.decode()

    _, job = make_inventory(name="stored-sink-options", sink=sink)
    Job.objects.filter(pk=job.pk).update(
        sink={**sink, "options": {"fs.defaultFS": "webhdfs://127.0.0.2/"}}
    )
    (batch,) = lifecycle.batches_plan(job=Job.objects.get(pk=job.pk), limit=1)
    batch = execute_refused_before_spark(batch)
    assert batch.status in (BatchStatus.FAILED, BatchStatus.DEAD)
    assert "sink options" in batch.error["message"]
    assert "'fs.defaultFS' is not a Spark parquet writer option" in batch.error["message"]


def test_the_worker_refuses_a_spec_carrying_a_configuration_key_before_spark(spark, tmp_path):
    sink = {"kind": "files", "path": str(tmp_path / "out")}
    spec = spec_for(["/nowhere.parquet"], sink, read_options={"fs.defaultFS": "viewfs://x/"})
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    assert (caught.value.type, caught.value.stage) == ("InvalidSpec", "config")
    assert "fs.defaultFS" in caught.value.message
    bad_sink = {**sink, "options": {"spark.sql.sources.commitProtocolClass": "x"}}
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec_for(["/nowhere.parquet"], bad_sink))
    assert caught.value.stage == "config"
    assert "spark.sql.sources.commitProtocolClass" in caught.value.message


@pytest.mark.parametrize("native", [False, True])
def test_object_store_reads_refuse_a_configuration_key_on_both_paths(spark, native):
    from workers.spark.sources.object_store import read

    spec = {
        "format": "json",
        "read_options": {"fs.s3a.endpoint": "http://127.0.0.2:9/"},
        "source": {
            "kind": "object_store",
            "format": "json",
            "spark_native": native,
            "objects": [{"location": "s3://bucket/a.json", "size": 1, "etag": "x"}],
        },
    }
    with pytest.raises(ReadError, match="'fs.s3a.endpoint' is not a Spark json reader option"):
        read(spark, spec)


@pytest.mark.django_db(transaction=True)
def test_the_clis_local_runner_refuses_a_configuration_key_before_starting_spark(
    cli,
    admin,
):
    from django.conf import settings

    from inventory.services.assets import assets_register

    landing = settings.DATA_DIR / "in-cli-options"
    landing.mkdir(parents=True, exist_ok=True)
    connector = Connector.objects.create(
        name="cli-options",
        kind="files",
        config={"path": str(landing), "read_options": {"fs.defaultFS": "webhdfs://127.0.0.2/"}},
    )
    assets_register(connector=connector, items=[(f"{landing}/a.parquet", 1, {})])
    cli.login()
    done = cli.run(
        "processor", "run", "example_customer_totals", "--connector", "cli-options", ok=False
    )
    line = one_line_error(done)
    assert "'fs.defaultFS' is not a Spark parquet reader option" in line
    assert "starting Spark" not in done.stderr + done.stdout
