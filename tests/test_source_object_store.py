"""`files` connectors over S3 (a real moto_server): discovery after a start-after cursor, checks
when the connector is saved, and batches read by a real Celery worker through pyarrow."""

import io
import json
import socket
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tests.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import (
    Asset,
    Backfill,
    Batch,
    BatchStatus,
    Connector,
    Restatement,
    RestatementCause,
    Watermark,
)
from inventory.services import discovery, dispatch
from inventory.services.connectors import connector_create
from inventory.services.errors import InvalidInput
from inventory.sources import object_store as source_object_store
from tests.api_support import token_client
from tests.factories import make_job
from tests.s3_fixtures import KEY_ENV, SECRET_ENV, SECRET_VALUE
from tests.worker_fixtures import read_sink, wait_until, write_orders
from workers.execution import batch_spec


def _config(s3_server, bucket, **extra) -> dict:
    return {
        "path": f"s3://{bucket}/landing/",
        "endpoint_url": s3_server.endpoint_url,
        "region": "us-east-1",
        "key_env": KEY_ENV,
        "secret_env": SECRET_ENV,
        **extra,
    }


def _put(s3_server, bucket, key, body: bytes = b"x") -> None:
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=body)


def _orders(tmp_path, name, *, first_id, count) -> bytes:
    return write_orders(tmp_path / name, first_id=first_id, count=count).read_bytes()


@pytest.fixture
def listings(monkeypatch):
    """Every listing discovery makes: (start_after, number of keys S3 returned)."""
    seen = []
    real = source_object_store.list_s3

    def spy(fs, *, bucket, prefix, start_after=""):
        keys = list(real(fs, bucket=bucket, prefix=prefix, start_after=start_after))
        seen.append((start_after, len(keys)))
        return iter(keys)

    monkeypatch.setattr(source_object_store, "list_s3", spy)
    return seen


# ---- discovery ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_discovery_registers_only_new_objects_listing_after_the_cursor(
    s3_server, s3_bucket, listings
):
    for n in range(3):
        _put(s3_server, s3_bucket, f"landing/2026-11-2{n}/part-0.parquet", b"p" * (10 + n))
    # no recheck window: each look lists only what sorts after the cursor
    connector = connector_create(
        name="s3-orders", kind="files", config=_config(s3_server, s3_bucket, recheck_seconds=0)
    )

    assert discovery.discover(connector) == 3
    assert discovery.discover(connector) == 0
    _put(s3_server, s3_bucket, "landing/2026-11-23/part-0.parquet", b"p" * 99)
    assert discovery.discover(connector) == 1

    last_of_first_look = "landing/2026-11-22/part-0.parquet"
    # the second look asked S3 only for keys after the cursor and got none; the third got one
    assert listings == [("", 3), (last_of_first_look, 0), (last_of_first_look, 1)]
    connector.refresh_from_db()
    assert connector.cursor == {
        "path": f"s3://{s3_bucket}/landing/",
        "start_after": "landing/2026-11-23/part-0.parquet",
    }
    assets = list(Asset.objects.filter(connector=connector).order_by("id"))
    assert [a.location for a in assets] == [
        f"s3://{s3_bucket}/landing/2026-11-2{n}/part-0.parquet" for n in range(4)
    ]
    head = s3_server.client().head_object(Bucket=s3_bucket, Key="landing/2026-11-23/part-0.parquet")
    assert assets[-1].weight == 99
    assert assets[-1].extra["etag"] == head["ETag"].strip('"')
    assert assets[-1].extra["last_modified"].startswith(head["LastModified"].strftime("%Y-%m-%d"))
    assert [a.weight for a in assets[:3]] == [10, 11, 12]


@pytest.mark.django_db
def test_discovery_applies_patterns_and_skips_hidden_and_underscore_names(s3_server, s3_bucket):
    for key in (
        "landing/a.csv",
        "landing/b.parquet",
        "landing/.c.parquet",
        "landing/_SUCCESS",
        "landing/_temporary/0/d.parquet",
        "landing/notes.txt",
        "elsewhere/e.parquet",
    ):
        _put(s3_server, s3_bucket, key)
    connector = connector_create(
        name="s3-patterns",
        kind="files",
        config=_config(s3_server, s3_bucket, patterns=["*.parquet"]),
    )
    assert discovery.discover(connector) == 1
    assert list(Asset.objects.filter(connector=connector).values_list("location", flat=True)) == [
        f"s3://{s3_bucket}/landing/b.parquet"
    ]


@pytest.mark.django_db
def test_the_cursor_waits_for_an_objects_marker(s3_server, s3_bucket):
    _put(s3_server, s3_bucket, "landing/1.parquet")
    _put(s3_server, s3_bucket, "landing/1.parquet.done")
    _put(s3_server, s3_bucket, "landing/2.parquet")  # no marker yet
    _put(s3_server, s3_bucket, "landing/3.parquet")
    _put(s3_server, s3_bucket, "landing/3.parquet.done")
    connector = connector_create(
        name="s3-markers", kind="files", config=_config(s3_server, s3_bucket, marker_suffix=".done")
    )
    assert discovery.discover(connector) == 2
    connector.refresh_from_db()
    # not past 2.parquet: it is listed again until its marker lands
    assert connector.cursor["start_after"] == "landing/1.parquet.done"
    _put(s3_server, s3_bucket, "landing/2.parquet.done")
    assert discovery.discover(connector) == 1
    locations = Asset.objects.filter(connector=connector).order_by("id")
    assert [a.location.rsplit("/", 1)[1] for a in locations] == [
        "1.parquet",
        "3.parquet",
        "2.parquet",
    ]
    connector.refresh_from_db()
    assert connector.cursor["start_after"] == "landing/3.parquet.done"


@pytest.mark.django_db
def test_a_key_sorting_before_the_cursor_is_missed_unless_listing_is_full(s3_server, s3_bucket):
    """The documented price of the start-after listing, and the option that lifts it."""
    _put(s3_server, s3_bucket, "landing/b.parquet")
    ordered = connector_create(
        name="s3-ordered", kind="files", config=_config(s3_server, s3_bucket)
    )
    full = connector_create(
        name="s3-full", kind="files", config=_config(s3_server, s3_bucket, listing="full")
    )
    assert discovery.discover(ordered) == 1 and discovery.discover(full) == 1
    _put(s3_server, s3_bucket, "landing/a.parquet")  # lands late with a smaller key
    assert discovery.discover(ordered) == 0
    assert discovery.discover(full) == 1
    assert discovery.discover(full) == 0


# ---- checks when the connector is saved --------------------------------------------------------


@pytest.mark.django_db
def test_a_bucket_that_does_not_exist_is_a_400_naming_config_path(role_users, s3_server):
    api = token_client(role_users["admin"])
    response = api.post(
        "/api/v1/connectors/",
        {"name": "nobucket", "kind": "files", "config": _config(s3_server, "no-such-bucket")},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "bucket no-such-bucket does not exist" in response.json()["config.path"][0]
    assert not Connector.objects.filter(name="nobucket").exists()


@pytest.mark.django_db
def test_an_unreachable_endpoint_is_refused_naming_config_path(s3_server):
    config = _config(s3_server, "bucket", endpoint_url="http://127.0.0.1:9")
    with pytest.raises(InvalidInput) as refused:
        connector_create(name="nowhere", kind="files", config=config)
    assert refused.value.field == "config.path"
    assert "cannot list s3://bucket/landing/" in str(refused.value)


@pytest.mark.django_db
def test_a_store_that_stops_answering_fails_the_look_within_the_listing_timeout(
    s3_server, s3_bucket, monkeypatch
):
    """Found by the large soak: a listing that never got its answer held discovery forever.
    The store here accepts the connection and never answers (botocore's own read timeout is 20 s
    a try); the look fails after the listing's bound, naming config.path and the store."""
    from inventory.sources.object_store import access

    connector = connector_create(
        name="s3-silent", kind="files", config=_config(s3_server, s3_bucket)
    )
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshakes; nothing ever reads or answers
    try:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        Connector.objects.filter(pk=connector.pk).update(
            config={**connector.config, "endpoint_url": endpoint}
        )
        connector.refresh_from_db()
        monkeypatch.setattr(access, "LIST_TIMEOUT_SECONDS", 1)
        started = time.monotonic()
        with pytest.raises(InvalidInput) as failed:
            discovery.discover(connector)
        took = time.monotonic() - started
    finally:
        silent.close()
    assert failed.value.field == "config.path"
    assert f"listing s3://{s3_bucket}/landing/ got no answer within 1 s" in str(failed.value)
    assert took < 15, took  # the bound, not botocore's 20 s read timeout and its retry
    assert not Asset.objects.filter(connector=connector).exists()


@pytest.mark.django_db
def test_a_credential_variable_that_is_not_set_is_refused_naming_the_key(
    role_users, s3_server, s3_bucket
):
    api = token_client(role_users["admin"])
    config = _config(s3_server, s3_bucket, key_env="TM_TEST_NO_SUCH_VAR")
    response = api.post(
        "/api/v1/connectors/", {"name": "nokey", "kind": "files", "config": config}, format="json"
    )
    assert response.status_code == 400
    assert "TM_TEST_NO_SUCH_VAR is not set" in response.json()["config.key_env"][0]


@pytest.mark.django_db
def test_a_literal_key_is_refused_and_env_names_are_accepted(role_users, s3_server, s3_bucket):
    api = token_client(role_users["admin"])
    leaky = {**_config(s3_server, s3_bucket), "secret_access_key": SECRET_VALUE}
    response = api.post(
        "/api/v1/connectors/", {"name": "leaky", "kind": "files", "config": leaky}, format="json"
    )
    assert response.status_code == 400
    assert "config.secret_access_key" in response.json()
    assert SECRET_VALUE not in response.content.decode()

    response = api.post(
        "/api/v1/connectors/",
        {"name": "named", "kind": "files", "config": _config(s3_server, s3_bucket)},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["config"]["secret_env"] == SECRET_ENV
    shown = api.get("/api/v1/connectors/named/").content.decode()
    assert SECRET_ENV in shown and SECRET_VALUE not in shown


# ---- batches read by a real worker -------------------------------------------------------------


def _settled(job, *, last_item: int):
    watermark = Watermark.objects.get(job=job)
    busy = Batch.objects.filter(job=job, status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING])
    return watermark.value == last_item and not busy.exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_processes_s3_objects_into_a_file_sink_each_row_once(
    tmp_path, s3_server, s3_bucket, celery_worker
):
    for n in range(3):
        body = _orders(tmp_path, f"o{n}.parquet", first_id=n * 100, count=10)
        _put(s3_server, s3_bucket, f"landing/day={n}/orders.parquet", body)
    connector = connector_create(
        name="s3-pipeline", kind="files", config=_config(s3_server, s3_bucket, lineage=True)
    )
    assert discovery.discover(connector) == 3
    sink = tmp_path / "sink"
    job = make_job(
        connector=connector,
        name="s3-copy",
        batch_weight=10**9,
        max_items=2,
        sink={"kind": "files", "path": str(sink)},
    )
    dispatch.job_run(job=job)
    last = Asset.objects.filter(connector=connector).order_by("-id").first()
    wait_until(lambda: _settled(job, last_item=last.pk), timeout=120, message="the S3 batches")

    rows = read_sink(sink)
    assert sorted(r["order_id"] for r in rows) == [n * 100 + i for n in range(3) for i in range(10)]
    assert {r["_tm_source_file"] for r in rows} == {
        f"s3://{s3_bucket}/landing/day={n}/orders.parquet" for n in range(3)
    }
    batches = list(Batch.objects.filter(job=job).order_by("span"))
    assert [b.item_count for b in batches] == [2, 1]
    assert all(b.status == BatchStatus.SUCCEEDED for b in batches)
    assert batches[0].result["rows_in"] == 20

    # one more object: the next run reads exactly that one
    body = _orders(tmp_path, "o3.parquet", first_id=300, count=4)
    _put(s3_server, s3_bucket, "landing/day=3/orders.parquet", body)
    assert discovery.discover(connector) == 1
    dispatch.job_run(job=job)
    last = Asset.objects.filter(connector=connector).order_by("-id").first()
    wait_until(lambda: _settled(job, last_item=last.pk), timeout=60, message="the new object")
    rows = read_sink(sink)
    assert len(rows) == 34 and len({r["order_id"] for r in rows}) == 34


@pytest.mark.django_db(transaction=True)
def test_a_json_lines_object_is_read_and_a_missing_object_fails_its_batch(
    tmp_path, s3_server, s3_bucket, celery_worker
):
    lines = "\n".join(json.dumps({"order_id": n, "amount": n / 2}) for n in range(5))
    _put(s3_server, s3_bucket, "landing/1.jsonl", lines.encode())
    _put(s3_server, s3_bucket, "landing/2.jsonl", lines.encode())
    connector = connector_create(name="s3-gone", kind="files", config=_config(s3_server, s3_bucket))
    assert discovery.discover(connector) == 2
    s3_server.client().delete_object(Bucket=s3_bucket, Key="landing/2.jsonl")
    job = make_job(
        connector=connector,
        name="s3-gone-copy",
        batch_weight=10**9,
        max_items=1,
        max_attempts=1,
        sink={"kind": "files", "path": str(tmp_path / "out")},
    )
    dispatch.job_run(job=job)
    dead = wait_until(
        lambda: Batch.objects.filter(job=job, status=BatchStatus.DEAD).first(),
        timeout=120,
        message="the batch of the deleted object to fail",
    )
    assert dead.error["stage"] == "read"
    assert dead.error["type"] == "ReadError"
    assert f"object s3://{s3_bucket}/landing/2.jsonl does not exist" in dead.error["message"]
    first = Batch.objects.get(job=job, status=BatchStatus.SUCCEEDED)
    assert first.result["rows_in"] == 5
    assert sorted(r["order_id"] for r in read_sink(tmp_path / "out")) == list(range(5))


@pytest.mark.django_db
def test_the_batch_spec_names_credentials_by_variable_only(role_users, s3_server, s3_bucket):
    table = pa.table({"order_id": [1, 2]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    _put(s3_server, s3_bucket, "landing/one.parquet", buffer.getvalue())
    connector = connector_create(name="s3-spec", kind="files", config=_config(s3_server, s3_bucket))
    discovery.discover(connector)
    job = make_job(connector=connector, name="s3-spec-job", batch_weight=10**9)
    [planned] = dispatch.job_run(job=job).planned
    spec = batch_spec(batch=Batch.objects.get(pk=planned))
    asset = Asset.objects.get(connector=connector)
    assert spec["items"] == [f"s3://{s3_bucket}/landing/one.parquet"]
    assert spec["source"]["kind"] == "object_store"
    assert spec["source"]["objects"] == [
        {"location": asset.location, "size": asset.weight, "etag": asset.extra["etag"]}
    ]
    assert spec["source"]["key_env"] == KEY_ENV and spec["source"]["secret_env"] == SECRET_ENV
    assert spec["format"] == "parquet" and spec["source"]["format"] == "parquet"
    dumped = json.dumps(spec)
    assert SECRET_VALUE not in dumped and "moto-key-AKIATEST" not in dumped
    api = token_client(role_users["admin"])
    for url in ("/api/v1/connectors/s3-spec/", f"/api/v1/jobs/{job.name}/", "/api/v1/batches/"):
        shown = api.get(url).content.decode()
        assert SECRET_VALUE not in shown, url


# ---- the worker's reader on its own ------------------------------------------------------------


def _source(s3_server, bucket, keys, **extra) -> dict:
    return {
        "format": "parquet",
        "source": {
            "kind": "object_store",
            "objects": [{"location": f"s3://{bucket}/{key}", "size": None} for key in keys],
            "endpoint_url": s3_server.endpoint_url,
            "region": "us-east-1",
            "key_env": KEY_ENV,
            "secret_env": SECRET_ENV,
            **extra,
        },
    }


def test_the_reader_reads_csv_objects_and_names_a_malformed_one(spark, s3_server, s3_bucket):
    from workers.spark.errors import ReadError
    from workers.spark.sources.object_store import read

    _put(s3_server, s3_bucket, "in/a.csv", b"order_id,amount\n1,2.5\n2,3.5\n")
    _put(s3_server, s3_bucket, "in/b.csv", b"order_id,amount\n3,4.5\n")
    spec = _source(s3_server, s3_bucket, ["in/a.csv", "in/b.csv"], format="csv")
    rows = read(spark, {**spec, "schema": "order_id BIGINT, amount DOUBLE"}).collect()
    assert sorted((r.order_id, r.amount) for r in rows) == [(1, 2.5), (2, 3.5), (3, 4.5)]

    _put(s3_server, s3_bucket, "in/bad.parquet", b"not parquet at all" * 4)
    with pytest.raises(ReadError, match=f"cannot read parquet object s3://{s3_bucket}/in/bad"):
        read(spark, _source(s3_server, s3_bucket, ["in/bad.parquet"]))


def test_the_reader_refuses_a_credential_variable_missing_on_the_worker(
    spark, s3_server, s3_bucket
):
    from workers.spark.errors import ReadError
    from workers.spark.sources.object_store import read

    spec = _source(s3_server, s3_bucket, ["in/a.parquet"], secret_env="TM_TEST_UNSET_VAR")
    with pytest.raises(ReadError, match="TM_TEST_UNSET_VAR .*secret_env.* not set"):
        read(spark, spec)


def test_spark_native_hands_s3a_paths_to_spark(spark, s3_server, s3_bucket):
    """This Spark has no hadoop-aws: the s3a path reaching spark.read is what fails."""
    from workers.spark.errors import ReadError
    from workers.spark.sources.object_store import read

    spec = _source(s3_server, s3_bucket, ["in/a.parquet"], spark_native=True)
    with pytest.raises(ReadError) as failed:
        read(spark, spec)
    assert "s3a" in str(failed.value)


# ---- objects rewritten under their key: restatements ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_object_whose_etag_changed_is_restated_and_its_rows_replaced_by_a_worker(
    tmp_path, s3_server, s3_bucket, celery_worker
):
    for n in range(2):
        body = _orders(tmp_path, f"o{n}.parquet", first_id=n * 100, count=5)
        _put(s3_server, s3_bucket, f"landing/day={n}/orders.parquet", body)
    connector = connector_create(
        name="s3-restated", kind="files", config=_config(s3_server, s3_bucket)
    )
    assert discovery.discover(connector) == 2
    sink = tmp_path / "sink"
    job = make_job(
        connector=connector,
        name="s3-restated-copy",
        batch_weight=10**9,
        max_items=1,
        sink={"kind": "files", "path": str(sink)},
    )
    dispatch.job_run(job=job)
    last = Asset.objects.filter(connector=connector).order_by("-id").first()
    wait_until(lambda: _settled(job, last_item=last.pk), timeout=120, message="the S3 batches")
    assert sorted(r["order_id"] for r in read_sink(sink)) == [*range(5), *range(100, 105)]
    first = Asset.objects.filter(connector=connector).order_by("id").first()
    etag_then = first.extra["etag"]

    # the producer rewrites day=0 under the same key: other rows, another ETag and size
    body = _orders(tmp_path, "o0-v2.parquet", first_id=50, count=3)
    _put(s3_server, s3_bucket, "landing/day=0/orders.parquet", body)
    assert discovery.discover(connector) == 0  # nothing new: a restatement
    first.refresh_from_db()
    assert first.extra["etag"] != etag_then and first.weight == len(body)
    assert first.extra["changed_after_registration"]["etag"] == [etag_then, first.extra["etag"]]
    record = Restatement.objects.get(job=job)
    assert (record.cause, record.status) == (RestatementCause.CHANGED_OBJECTS, "applied")
    assert (record.range_start, record.range_end) == (first.pk, first.pk)
    assert "day=0/orders.parquet" in record.reason

    dispatch.backfills_pace()  # beat's pacing step: the worker takes the backfill's batch
    wait_until(
        lambda: Backfill.objects.get(pk=record.backfill_id).status == "completed",
        timeout=120,
        message="the restatement's backfill",
    )
    # the rewritten object's old rows left the sink with the publish of its new ones
    assert sorted(r["order_id"] for r in read_sink(sink)) == [50, 51, 52, *range(100, 105)]
    assert discovery.discover(connector) == 0
    assert Restatement.objects.filter(job=job).count() == 1  # once per change


@pytest.mark.django_db
def test_the_recheck_lists_once_from_the_oldest_recently_registered_key(
    s3_server, s3_bucket, listings
):
    for n in range(3):
        _put(s3_server, s3_bucket, f"landing/2026-11-2{n}/part-0.parquet", b"p")
    connector = connector_create(
        name="s3-recheck", kind="files", config=_config(s3_server, s3_bucket)
    )
    assert discovery.discover(connector) == 3
    _put(s3_server, s3_bucket, "landing/2026-11-23/part-0.parquet", b"p")
    assert discovery.discover(connector) == 1
    # one listing per look: the second starts just before the oldest object registered within
    # recheck_seconds (a proper prefix of its key), covering the recheck and what is new
    assert listings == [("", 3), ("landing/2026-11-20/part-0.parque", 4)]


@pytest.mark.django_db
def test_a_full_listing_flags_a_rewritten_object_once_per_change(s3_server, s3_bucket):
    _put(s3_server, s3_bucket, "landing/a.parquet", b"one")
    connector = connector_create(
        name="s3-full-recheck", kind="files", config=_config(s3_server, s3_bucket, listing="full")
    )
    assert discovery.discover(connector) == 1
    asset = Asset.objects.get(connector=connector)
    assert "changed_after_registration" not in asset.extra
    assert discovery.discover(connector) == 0
    asset.refresh_from_db()
    assert "changed_after_registration" not in asset.extra  # unchanged: nothing flagged
    _put(s3_server, s3_bucket, "landing/a.parquet", b"three")
    assert discovery.discover(connector) == 0
    asset.refresh_from_db()
    assert asset.weight == 5 and asset.extra["changed_after_registration"]["size"] == [3, 5]
