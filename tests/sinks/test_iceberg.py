"""The Iceberg sink (issue 46): one catalog commit per batch, each source row once at every snapshot.

Every snapshot of the sink's table is read with pyiceberg and with DuckDB's own Iceberg reader
(its `iceberg` extension from PyPI, tests/support/duckdb_iceberg.py), and both must hold the same rows,
each once. The lifecycle tests drive batches by hand through the real lifecycle and the real
publish fence in PostgreSQL (tests/support/files_job.py); the catalog is a SQLite file
under the test's directory (an allowed root), or a PostgreSQL database that is not Tidemark's.
"""

import uuid
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import pytest

from inventory.models import Batch, BatchStatus, Watermark
from inventory.services import dispatch, lifecycle
from inventory.services.backfills import backfill_create
from inventory.services.corrections import watermark_correct
from inventory.services.errors import InvalidInput
from inventory.services.job_config import job_validate_runtime
from tests.support import duckdb_iceberg
from tests.support.files_job import (
    drain,
    expected_rows,
    expire_and_reap,
    make_files_job,
    run_and_commit,
    run_spark,
)
from tests.support.iceberg_tables import (
    assert_each_row_at_most_once_at_every_snapshot,
    assert_each_row_exactly_once_at_every_snapshot,
    iceberg_sink,
    latest_rows,
    load,
    snapshots,
)
from tests.support.sink_database import sink_database_dsn
from tests.support.worker_fixtures import wait_until
from workers.spark.errors import BatchError, SinkError
from workers.spark.fence import FencedOut, Replaced
from workers.spark.iceberg_sink import latest_token
from workers.spark.run import run_batch
from workers.spark.sinks import check_sink, write_sink


def fenced(token, replaced=()):
    @contextmanager
    def publish():
        yield Replaced(list(replaced), token=token)

    return publish


# ---- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sink", "field"),
    [
        ({"kind": "iceberg", "warehouse": "/w", "table": "a.b"}, "sink.catalog_uri"),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:///rel.db",
                "warehouse": "/w",
                "table": "a.b",
            },
            "sink.catalog_uri",
        ),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:////c.db",
                "catalog_dsn_env": "X",
                "warehouse": "/w",
                "table": "a.b",
            },
            "sink.catalog_uri",
        ),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:////c.db",
                "warehouse": "s3://b/w",
                "table": "a.b",
            },
            "sink.warehouse",
        ),
        (
            {"kind": "iceberg", "catalog_uri": "sqlite:////c.db", "warehouse": "/w", "table": "ab"},
            "sink.table",
        ),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:////c.db",
                "warehouse": "/w",
                "table": "a.b;",
            },
            "sink.table",
        ),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:////c.db",
                "warehouse": "/w",
                "table": "a.b",
                "mode": "merge",
            },
            "sink.mode",
        ),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:////c.db",
                "warehouse": "/w",
                "table": "a.b",
                "mode": "upsert",
            },
            "sink.key",
        ),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:////c.db",
                "warehouse": "/w",
                "table": "a.b",
                "key": ["k"],
            },
            "sink.key",
        ),
        (
            {
                "kind": "iceberg",
                "catalog_uri": "sqlite:////c.db",
                "warehouse": "/w",
                "table": "a.b",
                "path": "/x",
            },
            "sink.path",
        ),
        *(
            (
                {
                    "kind": "iceberg",
                    "catalog_uri": "sqlite:////c.db",
                    "warehouse": "/w",
                    "table": "a.b",
                    "mode": "upsert",
                    "key": ["k"],
                    "version_column": column,
                },
                "sink.version_column",
            )
            for column in ("a.b", "v`", "v\n", "", 5, "k")
        ),
    ],
)
def test_a_bad_iceberg_sink_is_refused_naming_the_field(sink, field):
    with pytest.raises(SinkError):
        check_sink(sink)
    with pytest.raises(InvalidInput) as refused:
        job_validate_runtime(sink=sink)
    assert refused.value.field == field


def test_the_catalog_and_warehouse_must_lie_under_the_allowed_roots(tmp_path):
    check_sink(iceberg_sink(tmp_path))
    job_validate_runtime(sink=iceberg_sink(tmp_path))
    outside = {**iceberg_sink(tmp_path), "catalog_uri": "sqlite:////etc/tidemark-catalog.db"}
    with pytest.raises(InvalidInput) as refused:
        job_validate_runtime(sink=outside)
    assert refused.value.field == "sink.catalog_uri"
    outside = {**iceberg_sink(tmp_path), "warehouse": "/etc/warehouse"}
    with pytest.raises(InvalidInput) as refused:
        job_validate_runtime(sink=outside)
    assert refused.value.field == "sink.warehouse"


@pytest.mark.django_db
def test_the_api_refuses_a_bad_iceberg_sink_with_a_400_naming_the_key(role_users, tmp_path):
    from inventory.models import Job
    from tests.support.api_support import make_inventory, token_client

    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    payload = {"name": "to-ice", "connector": connector.name, "batch_weight": 500}
    bad = {**iceberg_sink(tmp_path), "table": "no_namespace"}
    response = api.post("/api/v1/jobs/", {**payload, "sink": bad}, format="json")
    assert response.status_code == 400
    assert "sink.table" in response.json(), response.json()
    assert not Job.objects.filter(name="to-ice").exists()
    response = api.post(
        "/api/v1/jobs/", {**payload, "sink": iceberg_sink(tmp_path, mode="upsert")}, format="json"
    )
    assert "sink.key" in response.json(), response.json()
    good = iceberg_sink(tmp_path, mode="upsert", key=["key"])
    response = api.post("/api/v1/jobs/", {**payload, "sink": good}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["sink"]["kind"] == "iceberg"


# ---- the sink on its own -----------------------------------------------------------------------


def test_a_rerun_replaces_the_batch_in_one_snapshot_carrying_job_batch_and_token(spark, tmp_path):
    sink = iceberg_sink(tmp_path)
    rows = [(1, "a", "2024-01-01 00:00:00"), (2, "b", "2024-01-02 00:00:00")]
    first = spark.createDataFrame(rows, "key BIGINT, v STRING, at STRING").selectExpr(
        "key", "v", "CAST(at AS TIMESTAMP) AS at"
    )
    result = write_sink(first, sink, batch_id=7, job="j")
    assert (result["rows_out"], result["iceberg_table"]) == (2, "out.t")
    assert result["location"] == load(sink).location().removeprefix("file://")
    more = spark.sql("SELECT 3L AS key, 'c' AS v, TIMESTAMP'2024-01-03 00:00:00' AS at")
    write_sink(more, sink, batch_id=8, job="j")
    again = spark.sql("SELECT 1L AS key, 'A' AS v, TIMESTAMP'2024-01-04 00:00:00' AS at")
    write_sink(again, sink, batch_id=7, job="j")

    assert snapshots(sink) == [
        [(1, "a"), (2, "b")],
        [(1, "a"), (2, "b"), (3, "c")],
        [(1, "A"), (3, "c")],
    ]
    table = load(sink)
    summary = table.current_snapshot().summary
    assert summary.operation.value == "overwrite"
    assert {k: summary[k] for k in ("tidemark.job", "tidemark.batch", "tidemark.token")} == {
        "tidemark.job": "j",
        "tidemark.batch": "7",
        "tidemark.token": "2",
    }
    assert latest_token(table, "j") == 2
    # timestamps are Iceberg's (microseconds, UTC), read the same by both readers
    field = table.schema().find_field("at")
    assert str(field.field_type) == "timestamptz"
    stamps = duckdb_iceberg.rows_at(
        table.metadata_location, ["key"], table.current_snapshot().snapshot_id
    )
    assert stamps == [(1,), (3,)]
    arrow = table.scan().to_arrow()
    assert sorted(t.isoformat() for t in arrow.column("at").to_pylist()) == [
        "2024-01-03T00:00:00+00:00",
        "2024-01-04T00:00:00+00:00",
    ]


def test_an_output_whose_columns_differ_from_the_table_fails_naming_them(spark, tmp_path):
    sink = iceberg_sink(tmp_path)
    write_sink(spark.createDataFrame([(1, "a")], "key BIGINT, v STRING"), sink, batch_id=1, job="j")
    with pytest.raises(SinkError, match="differ from the Iceberg table's schema in extra, v"):
        write_sink(
            spark.createDataFrame([(2, 5, 1)], "key BIGINT, v INT, extra INT"),
            sink,
            batch_id=2,
            job="j",
        )
    assert snapshots(sink) == [[(1, "a")]]


def test_a_publish_older_than_the_tables_latest_token_cannot_commit(spark, tmp_path):
    sink = iceberg_sink(tmp_path)
    df = spark.createDataFrame([(1, "a")], "key BIGINT, v STRING")
    write_sink(df, sink, batch_id=1, attempt=2, job="j", publish=fenced(41))
    for token in (40, 41):
        with pytest.raises(FencedOut, match="later publish"):
            write_sink(df, sink, batch_id=1, attempt=1, job="j", publish=fenced(token))
    # another job's tokens are its own
    write_sink(df, {**sink, "table": "out.other"}, batch_id=1, job="k", publish=fenced(3))
    assert snapshots(sink) == [[(1, "a")]]
    data = Path(load(sink).location().removeprefix("file://")) / "data"
    # the refused attempts' files are gone; only the committed attempt's prefix is left
    assert sorted(p.name.split("-")[2] for p in data.glob("tidemark-b*")) == ["a2"]


def test_a_fence_that_fails_after_the_catalog_commit_puts_the_table_back(spark, tmp_path):
    sink = iceberg_sink(tmp_path)
    schema = "key BIGINT, v STRING"
    write_sink(spark.createDataFrame([(1, "a")], schema), sink, batch_id=1, job="j")

    @contextmanager
    def failing_commit():
        yield Replaced([1], token=None)  # batch 2 replaces batch 1 ...
        raise SinkError("publish fence: the commit failed")  # ... but the fence never commits

    with pytest.raises(SinkError, match="commit failed"):
        write_sink(
            spark.createDataFrame([(1, "A")], schema),
            sink,
            batch_id=2,
            job="j",
            publish=failing_commit,
        )
    assert snapshots(sink) == [[(1, "a")], [(1, "A")], [(1, "a")]]


def _racing(monkeypatch, race):
    """Run `race()` once, right after the sink read the table and before its commit: the
    commit is then built on a snapshot that is no longer the table's."""
    from workers.spark import iceberg_sink as module

    real, raced = module._live_files, []

    def live_files(table):
        found = real(table)
        if not raced:
            raced.append(True)
            race()
        return found

    monkeypatch.setattr(module, "_live_files", live_files)
    return raced


def test_a_commit_that_loses_the_catalogs_compare_and_swap_checks_again(
    spark, tmp_path, monkeypatch
):
    sink = iceberg_sink(tmp_path)
    schema = "key BIGINT, v STRING"
    write_sink(
        spark.createDataFrame([(1, "a")], schema), sink, batch_id=1, job="j", publish=fenced(1)
    )

    # another job's commit lands in between: this one loses the swap, reads again, commits on top
    other = spark.createDataFrame([(2, "b")], schema)
    raced = _racing(
        monkeypatch,
        lambda: write_sink(other, sink, batch_id=9, job="k", publish=fenced(5)),
    )
    write_sink(
        spark.createDataFrame([(3, "c")], schema), sink, batch_id=2, job="j", publish=fenced(2)
    )
    assert raced
    assert snapshots(sink) == [[(1, "a")], [(1, "a"), (2, "b")], [(1, "a"), (2, "b"), (3, "c")]]

    # a newer publish of the same job lands in between: the older one, checking again, is refused
    monkeypatch.undo()
    newer = spark.createDataFrame([(4, "d")], schema)
    _racing(monkeypatch, lambda: write_sink(newer, sink, batch_id=4, job="j", publish=fenced(11)))
    with pytest.raises(FencedOut, match="later publish"):
        write_sink(
            spark.createDataFrame([(5, "e")], schema), sink, batch_id=3, job="j", publish=fenced(10)
        )
    assert latest_rows(sink) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert_each_row_at_most_once_at_every_snapshot(sink)


def test_upsert_keeps_the_newest_row_of_each_key_once_at_every_snapshot(spark, tmp_path):
    sink = iceberg_sink(tmp_path, mode="upsert", key=["key"], version_column="ver")
    schema = "key BIGINT, v STRING, ver BIGINT"
    write_sink(spark.createDataFrame([(1, "a", 1), (2, "b", 1)], schema), sink, batch_id=1, job="j")
    # key 1 newer, key 2 older (kept as stored), key 3 new
    write_sink(
        spark.createDataFrame([(1, "a2", 2), (2, "old", 0), (3, "c", 1)], schema),
        sink,
        batch_id=2,
        job="j",
    )
    # a replay of batch 1 (same versions): ties go to the batch, older never overwrites newer
    write_sink(
        spark.createDataFrame([(1, "a", 1), (2, "b", 1)], schema),
        sink,
        batch_id=1,
        job="j",
    )
    assert snapshots(sink) == [
        [(1, "a"), (2, "b")],
        [(1, "a2"), (2, "b"), (3, "c")],
        [(1, "a2"), (2, "b"), (3, "c")],
    ]
    assert_each_row_at_most_once_at_every_snapshot(sink, columns=("key",))

    with pytest.raises(SinkError, match="twice with the same ver"):
        write_sink(
            spark.createDataFrame([(5, "x", 1), (5, "y", 1)], schema), sink, batch_id=3, job="j"
        )


def test_upsert_without_a_version_column_orders_by_the_batchs_source_order(spark, tmp_path):
    sink = iceberg_sink(tmp_path, mode="upsert", key=["key"])
    schema = "key BIGINT, v STRING"
    write_sink(spark.createDataFrame([(1, "new")], schema), sink, batch_id=2, job="j", version=20)
    write_sink(spark.createDataFrame([(1, "old")], schema), sink, batch_id=1, job="j", version=10)
    assert latest_rows(sink) == [(1, "new")]
    assert "_tm_version" in [f.name for f in load(sink).schema().fields]


# ---- the catalog's database --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_postgresql_catalog_that_is_not_tidemarks_own_database(spark, tmp_path, monkeypatch):
    from inventory.services.own_database import own_database_identity

    monkeypatch.setenv("TM_TEST_ICEBERG_DSN", sink_database_dsn())
    sink = {
        "kind": "iceberg",
        "catalog_dsn_env": "TM_TEST_ICEBERG_DSN",
        "warehouse": str(tmp_path / "warehouse"),
        "table": f"pg_{uuid.uuid4().hex[:8]}.t",
    }
    job_validate_runtime(sink=sink)
    own = own_database_identity()
    df = spark.createDataFrame([(1, "a"), (2, "b")], "key BIGINT, v STRING")
    write_sink(df, sink, batch_id=1, job="j", own_database=own)
    write_sink(df.where("key = 2"), sink, batch_id=1, job="j", own_database=own)
    assert snapshots(sink) == [[(1, "a"), (2, "b")], [(2, "b")]]
    with psycopg2.connect(sink_database_dsn()) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM iceberg_tables WHERE table_name = 't'")
        assert cur.fetchone()[0] >= 1


@pytest.mark.django_db
def test_tidemarks_own_database_is_never_the_catalog(spark, tmp_path, monkeypatch):
    from inventory.services.outputs import control_plane_dsn
    from inventory.services.own_database import own_database_identity

    monkeypatch.setenv("TM_TEST_OWN_DSN", control_plane_dsn())
    sink = {
        "kind": "iceberg",
        "catalog_dsn_env": "TM_TEST_OWN_DSN",
        "warehouse": str(tmp_path / "warehouse"),
        "table": "own.t",
    }
    with pytest.raises(InvalidInput) as refused:
        job_validate_runtime(sink=sink)
    assert refused.value.field == "sink.catalog_dsn_env"
    assert "Tidemark's own database" in refused.value.message
    # and the worker, given the control plane's identity, refuses before creating anything
    df = spark.createDataFrame([(1, "a")], "key BIGINT, v STRING")
    with pytest.raises(SinkError, match="Tidemark's own database"):
        write_sink(df, sink, batch_id=1, job="j", own_database=own_database_identity())
    assert not (tmp_path / "warehouse").exists()


# ---- through the lifecycle and the real fence --------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)


@pytestmark_db
def test_retry_replay_and_backfill_leave_each_row_once_at_every_snapshot(spark, tmp_path):
    sink = iceberg_sink(tmp_path)
    job, item_of = make_files_job(tmp_path, "to-iceberg", sink, items=6, max_items=2)

    # a retry: attempt 1 commits to the catalog, then its worker is lost before the control
    # plane commits; attempt 2 replaces attempt 1's files in its own snapshot
    batch = lifecycle.batch_acquire(job=job, worker="w1")
    run_spark(spark, batch)
    expire_and_reap(batch)
    drain(spark, job)
    assert latest_rows(sink) == expected_rows(range(6))
    assert Batch.objects.get(pk=batch.pk).attempt == 2

    # a replay after a backward correction
    second = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).order_by("span")[1]
    watermark_correct(job=job, value=second.span.lower - 1, actor="a", reason="fix", replay=True)
    drain(spark, job)
    assert latest_rows(sink) == expected_rows(range(6))
    assert Batch.objects.filter(job=job, status=BatchStatus.SUPERSEDED).exists()

    # a backfill over committed items
    ids = sorted(item_of)
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[3], reason="rewrite")
    drain(spark, job)
    assert backfill.batches.filter(status=BatchStatus.SUCCEEDED).count() == 2

    assert_each_row_at_most_once_at_every_snapshot(sink)
    assert latest_rows(sink) == expected_rows(range(6))
    table = load(sink)
    tidemark = [s.summary for s in table.snapshots() if s.summary.get("tidemark.job")]
    assert len(tidemark) == len(table.snapshots())  # every publish was one snapshot
    assert any(s.get("tidemark.replaced") for s in tidemark)
    tokens = [int(s["tidemark.token"]) for s in tidemark]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


@pytestmark_db
def test_an_upsert_sink_keeps_each_key_once_through_retry_replay_and_backfill(spark, tmp_path):
    sink = iceberg_sink(tmp_path, mode="upsert", key=["key"])
    job, item_of = make_files_job(tmp_path, "upsert-iceberg", sink, items=6, max_items=2)

    batch = lifecycle.batch_acquire(job=job, worker="w1")
    run_spark(spark, batch)
    expire_and_reap(batch)  # committed to the catalog, lost before the control plane committed
    drain(spark, job)
    second = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).order_by("span")[1]
    watermark_correct(job=job, value=second.span.lower - 1, actor="a", reason="fix", replay=True)
    drain(spark, job)
    ids = sorted(item_of)
    backfill_create(job=job, range_start=ids[0], range_end=ids[3], reason="rewrite")
    drain(spark, job)

    for i, rows in enumerate(snapshots(sink, columns=("key",))):
        assert len(rows) == len(set(rows)), f"a key twice at snapshot {i}"
    assert latest_rows(sink) == expected_rows(range(6))
    assert len(load(sink).snapshots()) >= 6  # 3 batches, the retry, replayed and backfilled ones


@pytestmark_db
def test_a_stale_attempt_is_fenced_out_before_it_reaches_the_catalog(spark, tmp_path):
    from workers import specs

    sink = iceberg_sink(tmp_path)
    job, _ = make_files_job(tmp_path, "stale-iceberg", sink, items=2)
    stale = lifecycle.batch_acquire(job=job, worker="slow")
    stale_spec = specs.batch_spec(batch=stale)
    expire_and_reap(stale)
    live = lifecycle.batch_acquire(job=job, worker="fast")
    run_and_commit(spark, live)
    assert snapshots(sink) == [expected_rows(range(2))]

    with pytest.raises(BatchError) as refused:
        run_batch(spark, stale_spec)
    assert refused.value.type == "FencedOut"
    assert snapshots(sink) == [expected_rows(range(2))]


@pytestmark_db
def test_a_worker_runs_a_files_to_iceberg_job_over_several_batches(spark, tmp_path, celery_worker):
    sink = iceberg_sink(tmp_path)
    job, item_of = make_files_job(tmp_path, "worker-iceberg", sink, items=5, max_items=2)
    last = max(item_of)
    dispatch.job_run(job=job)
    wait_until(
        lambda: Watermark.objects.get(job=job).value == last
        and not Batch.objects.filter(job=job, status__in=["queued", "running"]).exists(),
        timeout=180,
        message="the files-to-Iceberg batches",
    )
    assert latest_rows(sink) == expected_rows(range(5))
    assert len(load(sink).snapshots()) == Batch.objects.filter(job=job).count() == 3
    assert_each_row_at_most_once_at_every_snapshot(sink)


# ---- the fence failing after the catalog commit, through the real lifecycle --------------------


def _fence_fails_once_after_the_catalog_commit(monkeypatch, batch_id: int, *, recorded: bool):
    """The real fence, for `batch_id`'s next publish only, fails after the sink's catalog commit:
    `recorded=False`, tidemark_publish_end fails (the fence's transaction rolls back: nothing
    recorded); `recorded=True`, the fence's transaction commits but its answer is lost (the
    connection drops after COMMIT): the control plane has the publish, the sink sees an error."""
    from workers.spark import fence

    real, failed = fence.database_publish, []

    def database_publish(*, dsn, batch_id: int, attempt: int):
        publish = real(dsn=dsn, batch_id=batch_id, attempt=attempt)
        if batch_id != target or failed:
            return publish

        @contextmanager
        def failing():
            failed.append(attempt)
            if recorded:
                with publish() as replaced:
                    yield replaced
                raise SinkError("publish fence: the connection was lost after COMMIT")
            with publish() as replaced:
                yield replaced
                raise SinkError("publish fence: tidemark_publish_end failed")

        return failing

    target = batch_id
    monkeypatch.setattr(fence, "database_publish", database_publish)
    return failed


@pytestmark_db
@pytest.mark.parametrize("mode", ["append", "upsert"])
@pytest.mark.parametrize("recorded", [False, True], ids=["rolled-back", "answer-lost"])
def test_a_replay_whose_fence_fails_after_the_catalog_commit_keeps_each_row_once_at_every_snapshot(
    spark, tmp_path, monkeypatch, mode, recorded
):
    """First publish, a replay whose fence fails after its catalog commit (the sink's undo
    snapshot), the retry: every snapshot, read by pyiceberg and DuckDB, holds each source row
    once, and none after the first complete one misses any."""
    extra = {"mode": "upsert", "key": ["key"]} if mode == "upsert" else {}
    sink = iceberg_sink(tmp_path, **extra)
    job, _ = make_files_job(tmp_path, f"undo-{mode}-{recorded}", sink, items=6, max_items=2)
    drain(spark, job)
    assert latest_rows(sink) == expected_rows(range(6))
    published = len(load(sink).snapshots())

    second = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).order_by("span")[1]
    watermark_correct(job=job, value=second.span.lower - 1, actor="a", reason="fix", replay=True)
    replay = lifecycle.batch_acquire(job=job, worker="w1")
    failed = _fence_fails_once_after_the_catalog_commit(monkeypatch, replay.pk, recorded=recorded)
    with pytest.raises(BatchError, match="publish fence"):
        run_spark(spark, replay)
    assert failed == [1]
    lifecycle.batch_fail(batch_id=replay.pk, attempt=1, error={"message": "fence failed"})
    table = load(sink)
    # the replay's snapshot, then the undo snapshot putting the replaced output back
    assert len(table.snapshots()) == published + 2
    assert table.current_snapshot().summary["tidemark.reverted-snapshot"]
    assert latest_rows(sink) == expected_rows(range(6))

    drain(spark, job)
    assert Batch.objects.get(pk=replay.pk).status == BatchStatus.SUCCEEDED
    assert latest_rows(sink) == expected_rows(range(6))
    if mode == "append":
        assert_each_row_exactly_once_at_every_snapshot(sink, items=6)
    else:
        for i, rows in enumerate(snapshots(sink)):
            keys = [key for key, _ in rows]
            assert len(keys) == len(set(keys)), f"a key twice at snapshot {i}"
            if i >= published - 1:  # every item was published by then
                assert rows == expected_rows(range(6)), f"snapshot {i} lost rows"
