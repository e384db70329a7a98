"""Exactly once across retry, replay and backfill (issue 8, docs/design.md invariants 5, 7, 8).

Batches run in this process through the real lifecycle (acquire, batch_spec, run_batch on the
session's SparkSession, succeed), so every publish goes through the real fence in PostgreSQL.
The fence opens its own connection: these tests commit (transaction=True).
"""

import psycopg2
import pytest
from django.db import connection

from inventory import selectors
from inventory.models import Batch, BatchStatus, ConnectorKind, Watermark
from inventory.services import lifecycle, outputs
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create
from inventory.services.corrections import watermark_correct
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.jobs import job_create
from tests.support.files_job import (
    ROWS_PER_ITEM,
    drain,
    expected_rows,
    expire_and_reap,
    make_files_job,
    run_and_commit,
    run_spark,
    sink_rows,
)
from tests.support.sink_database import sink_cursor
from workers import specs
from workers.spark.errors import BatchError
from workers.spark.run import run_batch
from workers.spark.sinks import write_sink

pytestmark = pytest.mark.django_db(transaction=True)


# ---- a small files job, driven by hand ---------------------------------------------------------


# ---- item 1: the file sink under replay and backfill -------------------------------------------


def test_a_replay_after_a_backward_correction_leaves_each_row_once_in_the_file_sink(
    spark, tmp_path
):
    sink = {"kind": "files", "path": str(tmp_path / "out")}
    job, item_of = make_files_job(tmp_path, "replayed", sink, items=6)
    drain(spark, job)
    assert sink_rows(spark, sink) == expected_rows(range(6))

    first = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).order_by("span")[1]
    watermark_correct(
        job=job, value=first.span.lower - 1, actor="alice", reason="bug fix", replay=True
    )
    drain(spark, job)
    # before issue 8 the replayed batches' rows sat next to the superseded ones' (twice)
    assert sink_rows(spark, sink) == expected_rows(range(6))
    superseded = Batch.objects.filter(job=job, status=BatchStatus.SUPERSEDED)
    assert superseded.exists()
    assert all(b.replaced_by_id is not None for b in superseded)


def test_a_backfill_over_committed_items_rewrites_them_and_leaves_each_row_once(spark, tmp_path):
    sink = {"kind": "files", "path": str(tmp_path / "out")}
    job, item_of = make_files_job(tmp_path, "backfilled", sink, items=5)
    drain(spark, job)
    ids = sorted(item_of)
    # a range that starts inside the first batch: the backfill widens it to whole batches
    committed = list(Batch.objects.filter(job=job).order_by("span").values_list("span", flat=True))
    backfill = backfill_create(job=job, range_start=ids[1], range_end=ids[3], reason="rewrite")
    planned = list(backfill.batches.order_by("span").values_list("span", flat=True))
    assert planned == committed[:2]
    drain(spark, job)
    assert backfill.batches.filter(status=BatchStatus.SUCCEEDED).count() == 2
    assert sink_rows(spark, sink) == expected_rows(range(5))


# ---- item 2: table sinks keep the newer version ------------------------------------------------


def test_an_older_batch_committing_late_never_overwrites_a_newer_row(spark, sink_dsn):
    schema = "key BIGINT, v STRING"
    for mode in ("upsert", "coalesce"):
        sink = {"kind": "postgres", "dsn_env": sink_dsn, "table": f"latest_{mode}", "key": ["key"]}
        sink["mode"] = mode
        newer = spark.createDataFrame([(1, "new")], schema)
        older = spark.createDataFrame([(1, "old"), (2, "only-old")], schema)
        write_sink(newer, sink, batch_id=2, version=19)  # items [10, 20)
        write_sink(older, sink, batch_id=1, version=9)  # items [0, 10), committing late
        assert sink_rows(spark, sink) == [(1, "new"), (2, "only-old")], mode
        # a replay of the newer range (same version) still rewrites it
        write_sink(spark.createDataFrame([(1, "fixed")], schema), sink, batch_id=3, version=19)
        assert sink_rows(spark, sink) == [(1, "fixed"), (2, "only-old")], mode


def test_a_declared_version_column_decides_which_row_wins(spark, sink_dsn):
    schema = "key BIGINT, v STRING, seq BIGINT"
    sink = {
        "kind": "postgres",
        "dsn_env": sink_dsn,
        "table": "versioned",
        "key": ["key"],
        "mode": "upsert",
        "version_column": "seq",
    }
    write_sink(spark.createDataFrame([(1, "b", 2)], schema), sink, batch_id=2, version=1)
    write_sink(spark.createDataFrame([(1, "a", 1)], schema), sink, batch_id=1, version=99)
    with sink_cursor() as cursor:
        cursor.execute("SELECT key, v, seq FROM versioned")
        assert cursor.fetchall() == [(1, "b", 2)]


def test_an_append_retry_after_the_merge_committed_replaces_instead_of_adding(
    spark, tmp_path, sink_dsn
):
    sink = {"kind": "postgres", "dsn_env": sink_dsn, "table": "appended", "mode": "append"}
    job, _ = make_files_job(tmp_path, "append-retry", sink, items=2, max_items=2)
    batch = lifecycle.batch_acquire(job=job, worker="w1")
    run_spark(spark, batch)  # merged and published; the worker dies before it commits
    expire_and_reap(batch)
    drain(spark, job)
    assert sink_rows(spark, sink) == expected_rows(range(2))
    with sink_cursor() as cursor:
        cursor.execute(
            "SELECT attempt, rows FROM tidemark_sink.ledger WHERE batch_id = %s", [batch.pk]
        )
        assert cursor.fetchall() == [(2, 2 * ROWS_PER_ITEM)]


# ---- item 3: fencing ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["files", "postgres"])
def test_a_stale_attempt_can_neither_publish_nor_touch_the_live_attempts_staging(
    spark, tmp_path, sink_dsn, kind
):
    sink = (
        {"kind": "files", "path": str(tmp_path / "out")}
        if kind == "files"
        else {"kind": "postgres", "dsn_env": sink_dsn, "table": "fenced", "mode": "append"}
    )
    job, _ = make_files_job(tmp_path, f"fenced-{kind}", sink, items=2)
    stale = lifecycle.batch_acquire(job=job, worker="slow")
    stale_spec = specs.batch_spec(batch=stale)
    expire_and_reap(stale)
    live = lifecycle.batch_acquire(job=job, worker="fast")
    assert (live.pk, live.attempt) == (stale.pk, 2)
    if kind == "files":
        # attempt 2 is still staging its output when attempt 1 wakes up
        staged = tmp_path / "out" / "_staging" / f"batch_id={live.pk}-a2-0123456789ab"
        staged.mkdir(parents=True)

    with pytest.raises(BatchError) as fenced:
        run_batch(spark, stale_spec)
    assert fenced.value.type == "FencedOut"
    assert sink_rows(spark, sink) == []
    if kind == "files":
        assert staged.exists()
        staged.rmdir()

    run_and_commit(spark, live)
    assert sink_rows(spark, sink) == expected_rows(range(2))


def test_a_cancelled_running_batch_cannot_publish_and_its_refill_writes_each_row_once(
    spark, tmp_path
):
    sink = {"kind": "files", "path": str(tmp_path / "out")}
    job, _ = make_files_job(tmp_path, "cancelled", sink, items=4)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    spec = specs.batch_spec(batch=batch)
    lifecycle.batch_cancel(batch_id=batch.pk, actor="ops", reason="wrong config")
    with pytest.raises(BatchError) as fenced:
        run_batch(spark, spec)
    assert fenced.value.type == "FencedOut"
    drain(spark, job)
    assert sink_rows(spark, sink) == expected_rows(range(4))


# ---- item 4: external meta tables with writers committing out of order -------------------------


def test_a_batch_whose_output_is_published_cannot_be_cancelled_and_still_commits_once(
    spark, tmp_path
):
    """Cancelling after the publish would leave rows in the sink that no committed batch owns."""
    sink = {"kind": "files", "path": str(tmp_path / "out")}
    job, _ = make_files_job(tmp_path, "published", sink, items=2, max_items=2)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    result = run_spark(spark, batch)  # written and published; the commit has not happened yet

    with pytest.raises(Conflict, match="already written its output"):
        lifecycle.batch_cancel(batch_id=batch.pk, actor="op", reason="changed my mind")
    assert Batch.objects.get(pk=batch.pk).status == BatchStatus.RUNNING
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result=result)
    assert sink_rows(spark, sink) == expected_rows(range(2))


def test_ids_committing_out_of_order_in_a_meta_table_are_not_lost():
    dsn = outputs.control_plane_dsn()
    setup = psycopg2.connect(dsn)
    setup.autocommit = True
    with setup.cursor() as cur:
        cur.execute(
            "CREATE TABLE ooo_meta (uid bigserial PRIMARY KEY, item text NOT NULL, weight bigint);"
            "GRANT SELECT ON ooo_meta TO tidemark_reader"
        )
    connector = connector_create(
        name="ooo", kind=ConnectorKind.FILES, config={"meta_table": {"table": "ooo_meta"}}
    )
    job = job_create(name="ooo-job", connector=connector, batch_weight=100, max_items=100)
    writer_a, writer_b = psycopg2.connect(dsn), psycopg2.connect(dsn)
    try:
        with writer_a.cursor() as a:
            a.execute("INSERT INTO ooo_meta (item, weight) VALUES ('a', 1) RETURNING uid")
            assert a.fetchone()[0] == 1  # A takes uid 1 and has not committed
        with writer_b.cursor() as b:
            b.execute("INSERT INTO ooo_meta (item, weight) VALUES ('b', 1) RETURNING uid")
            assert b.fetchone()[0] == 2
        writer_b.commit()  # B commits first

        # before issue 8: a batch [0, 3) with uid 2 only, and uid 1 never processed
        early = lifecycle.batch_acquire(job=job, worker="w")
        assert early is None or early.span.upper <= 1

        writer_a.commit()
        batch = lifecycle.batch_acquire(job=job, worker="w")
        assert (batch.span.lower, batch.span.upper, batch.item_count) == (0, 3, 2)
    finally:
        writer_a.close()
        writer_b.close()
        with setup.cursor() as cur:
            cur.execute("DROP TABLE ooo_meta")
        setup.close()


def test_a_meta_table_visibility_mode_is_validated():
    with pytest.raises(InvalidInput) as refused:
        connector_create(
            name="bad-visibility",
            kind=ConnectorKind.FILES,
            config={"meta_table": {"table": "inventory_asset", "visibility": "hope"}},
        )
    assert "visibility" in refused.value.field or "table" in refused.value.field


# ---- item 5: holes -----------------------------------------------------------------------------


def test_an_emptied_hole_does_not_stop_the_job_and_a_waiting_hole_is_named():
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE hole_meta (uid bigint PRIMARY KEY, item text, weight bigint, keep bool);"
            "INSERT INTO hole_meta SELECT g, 'i' || g, 1, true FROM generate_series(1, 6) AS g;"
            "GRANT SELECT ON hole_meta TO tidemark_reader"
        )
    connector = connector_create(
        name="holes",
        kind=ConnectorKind.FILES,
        config={
            "meta_table": {
                "table": "hole_meta",
                "filters": [{"column": "keep", "op": "eq", "value": True}],
            }
        },
    )
    job = job_create(name="holes-job", connector=connector, batch_weight=2, max_items=2)
    first = lifecycle.batch_acquire(job=job, worker="w")
    second = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=second.pk, attempt=second.attempt)
    lifecycle.batch_cancel(batch_id=first.pk, actor="ops", reason="test")
    job.refresh_from_db()
    assert selectors.job_blocker(job=job).pk == first.pk  # the hole is named, not null

    with connection.cursor() as cursor:
        cursor.execute("UPDATE hole_meta SET keep = false WHERE uid IN (1, 2)")
    # before issue 8 acquire planned nothing beyond the hole, forever
    third = lifecycle.batch_acquire(job=job, worker="w")
    assert third is not None and third.span.lower == second.span.upper
    lifecycle.batch_succeed(batch_id=third.pk, attempt=third.attempt)
    assert Watermark.objects.get(job=job).position == third.span.upper
    skipped = Batch.objects.get(job=job, status=BatchStatus.SKIPPED)
    assert (skipped.span.lower, skipped.span.upper) == (first.span.lower, first.span.upper)


# ---- item 6: watermark values checked before anything is written -------------------------------


def test_a_watermark_column_of_the_wrong_type_fails_the_batch_before_writing(spark, tmp_path):
    sink = {"kind": "files", "path": str(tmp_path / "out")}
    job, _ = make_files_job(tmp_path, "typed", sink, items=1)
    job.connector.config = {**job.connector.config, "watermark_column": "key"}
    job.connector.save(update_fields=["config"])
    job.watermark_type = "datetime"
    job.save(update_fields=["watermark_type"])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    with pytest.raises(BatchError) as refused:
        run_spark(spark, batch)
    assert refused.value.type == "WatermarkTypeMismatch"
    assert "'key'" in refused.value.message and "datetime" in refused.value.message
    assert not (tmp_path / "out").exists()


def test_a_key_value_job_over_a_watermark_column_is_refused_when_saved(tmp_path):
    connector = connector_create(
        name="kv-src", kind="files", config={"path": str(tmp_path), "watermark_column": "ts"}
    )
    with pytest.raises(InvalidInput) as refused:
        job_create(name="kv", connector=connector, batch_weight=1, watermark_type="key_value")
    assert refused.value.field == "watermark_type"
