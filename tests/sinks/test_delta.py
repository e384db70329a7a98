"""The Delta Lake sink (issue 22): one Delta commit per batch, each source row once at every version.

Spark cannot read Delta here (no jar): every version of the table is read with `deltalake` and
with DuckDB's own Delta reader (its `delta` extension, installed from PyPI, tests/support/duckdb_delta.py).
The lifecycle tests drive batches by hand through the real lifecycle and the real publish fence
in PostgreSQL (tests/support/files_job.py); the worker test runs a real Celery worker.
"""

from contextlib import contextmanager

import pytest
from deltalake import DeltaTable

from inventory.models import Asset, Batch, BatchStatus, Watermark
from inventory.services import dispatch, lifecycle
from inventory.services.backfills import backfill_create
from inventory.services.corrections import watermark_correct
from inventory.services.errors import InvalidInput
from inventory.services.job_config import job_validate_runtime
from tests.support.delta_tables import (
    assert_each_row_at_most_once_at_every_version,
    rows_at,
    versions,
)
from tests.support.files_job import (
    drain,
    expected_rows,
    expire_and_reap,
    make_files_job,
    run_and_commit,
    run_spark,
)
from tests.support.worker_fixtures import wait_until
from workers.spark.delta_sink import app_id
from workers.spark.errors import BatchError, SinkError
from workers.spark.fence import FencedOut, Replaced
from workers.spark.run import run_batch
from workers.spark.sinks import check_sink, write_sink

# ---- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sink", "reason", "field"),
    [
        ({"kind": "delta"}, "'path'", "sink.path"),
        ({"kind": "delta", "path": "s3://bucket/t"}, "absolute local directory", "sink.path"),
        ({"kind": "delta", "path": "/t", "mode": "upsert"}, "'mode'", "sink.mode"),
        ({"kind": "delta", "path": "/t", "partition_by": "day"}, "'partition_by'", None),
        ({"kind": "delta", "path": "/t", "format": "csv"}, "unknown keys", "sink.format"),
    ],
)
def test_a_bad_delta_sink_is_refused_naming_the_field(sink, reason, field):
    with pytest.raises(SinkError, match=reason):
        check_sink(sink)
    with pytest.raises(InvalidInput) as refused:
        job_validate_runtime(sink=sink)
    # the key the check names (a key the kind does not read by itself: check_known_keys)
    assert refused.value.field == (field or "sink.partition_by")


def test_a_valid_delta_sink_passes():
    check_sink({"kind": "delta", "path": "/data/t", "mode": "append", "partition_by": ["day"]})
    check_sink({"kind": "delta", "path": "file:///data/t"})


# ---- the sink on its own -----------------------------------------------------------------------


def test_a_rerun_replaces_the_batch_in_one_commit_and_partitions_are_kept(spark, tmp_path):
    out = tmp_path / "t"
    sink = {"kind": "delta", "path": str(out), "partition_by": ["day"]}
    schema = "key BIGINT, v STRING, day STRING"
    first = spark.createDataFrame([(1, "a", "d1"), (2, "b", "d2")], schema)
    result = write_sink(first, sink, batch_id=7, job="j")
    assert (result["rows_out"], result["delta_version"], result["location"]) == (2, 0, str(out))
    write_sink(spark.createDataFrame([(3, "c", "d1")], schema), sink, batch_id=8, job="j")
    # batch 7 again (a rerun by hand): its files leave in the commit that adds the new ones
    write_sink(spark.createDataFrame([(1, "A", "d1")], schema), sink, batch_id=7, job="j")

    assert versions(out) == [
        [(1, "a"), (2, "b")],
        [(1, "a"), (2, "b"), (3, "c")],
        [(1, "A"), (3, "c")],
    ]
    table = DeltaTable(str(out))
    assert table.metadata().partition_columns == ["day"]
    assert table.transaction_version(app_id("j")) == 2
    assert table.history(1)[0]["tidemark"] == {
        "batch_id": 7,
        "attempt": 0,
        "job": "j",
        "replaced": [],
    }


def test_an_output_whose_columns_differ_from_the_table_fails_the_batch_naming_them(spark, tmp_path):
    sink = {"kind": "delta", "path": str(tmp_path / "t")}
    write_sink(spark.createDataFrame([(1, "a")], "key BIGINT, v STRING"), sink, batch_id=1, job="j")
    with pytest.raises(SinkError, match="differ from the Delta table's schema in extra, v"):
        write_sink(
            spark.createDataFrame([(2, 5, 1)], "key BIGINT, v INT, extra INT"),
            sink,
            batch_id=2,
            job="j",
        )
    assert versions(tmp_path / "t") == [[(1, "a")]]


def test_a_publish_older_than_the_tables_txn_version_cannot_commit(spark, tmp_path):
    """The Delta log's own check: a publish whose token is not above the job's recorded txn
    version (a stale attempt whose fence is long gone, or the same publish twice) is refused."""
    out = tmp_path / "t"
    sink = {"kind": "delta", "path": str(out)}
    df = spark.createDataFrame([(1, "a")], "key BIGINT, v STRING")

    def fenced(token):
        @contextmanager
        def publish():
            yield Replaced([], token=token)

        return publish

    write_sink(df, sink, batch_id=1, attempt=2, job="j", publish=fenced(41))
    for token in (40, 41):
        with pytest.raises(FencedOut, match="later publish"):
            write_sink(df, sink, batch_id=1, attempt=1, job="j", publish=fenced(token))
    assert versions(out) == [[(1, "a")]]
    # the refused attempts' files are gone; only the committed attempt's prefix is left
    assert sorted(p.name.split("-")[2] for p in out.glob("tidemark-b*")) == ["a2"]


def test_a_fence_that_fails_after_the_delta_commit_puts_the_table_back(spark, tmp_path):
    out = tmp_path / "t"
    sink = {"kind": "delta", "path": str(out)}
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
    # version 1 swapped the batches in one commit, version 2 swapped them back
    assert versions(out) == [[(1, "a")], [(1, "A")], [(1, "a")]]


# ---- through the lifecycle and the real fence --------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)


@pytestmark_db
def test_retry_replay_and_backfill_leave_each_row_once_at_every_delta_version(spark, tmp_path):
    out = tmp_path / "delta"
    sink = {"kind": "delta", "path": str(out)}
    job, item_of = make_files_job(tmp_path, "to-delta", sink, items=6, max_items=2)

    # a retry: attempt 1 commits to Delta, then its worker is lost before the control plane
    # commits; attempt 2 replaces attempt 1's files in its own commit
    batch = lifecycle.batch_acquire(job=job, worker="w1")
    run_spark(spark, batch)
    expire_and_reap(batch)
    drain(spark, job)
    assert rows_at(out) == expected_rows(range(6))
    assert Batch.objects.get(pk=batch.pk).attempt == 2

    # a replay after a backward correction
    second = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).order_by("span")[1]
    watermark_correct(job=job, value=second.span.lower - 1, actor="a", reason="fix", replay=True)
    drain(spark, job)
    assert rows_at(out) == expected_rows(range(6))
    assert Batch.objects.filter(job=job, status=BatchStatus.SUPERSEDED).exists()

    # a backfill over committed items
    ids = sorted(item_of)
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[3], reason="rewrite")
    drain(spark, job)
    assert backfill.batches.filter(status=BatchStatus.SUCCEEDED).count() == 2

    assert_each_row_at_most_once_at_every_version(out)
    assert rows_at(out) == expected_rows(range(6))
    # every publish was one commit: 3 batches, their retry, the replayed and backfilled ones
    history = [h["tidemark"] for h in reversed(DeltaTable(str(out)).history()) if "tidemark" in h]
    assert len(history) == DeltaTable(str(out)).version() + 1
    assert any(h["replaced"] for h in history)
    # the txn version of the job is the fence's last publish token
    assert DeltaTable(str(out)).transaction_version(app_id(job.name)) is not None


@pytestmark_db
def test_a_stale_attempt_is_fenced_out_before_it_reaches_the_delta_log(spark, tmp_path):
    from workers import specs

    out = tmp_path / "delta"
    job, _ = make_files_job(tmp_path, "stale-delta", {"kind": "delta", "path": str(out)}, items=2)
    stale = lifecycle.batch_acquire(job=job, worker="slow")
    stale_spec = specs.batch_spec(batch=stale)
    expire_and_reap(stale)
    live = lifecycle.batch_acquire(job=job, worker="fast")
    run_and_commit(spark, live)
    assert versions(out) == [expected_rows(range(2))]

    with pytest.raises(BatchError) as fenced:
        run_batch(spark, stale_spec)
    assert fenced.value.type == "FencedOut"
    assert versions(out) == [expected_rows(range(2))]


@pytestmark_db
def test_a_worker_runs_a_files_to_delta_job_over_several_batches(spark, tmp_path, celery_worker):
    out = tmp_path / "delta"
    job, item_of = make_files_job(
        tmp_path, "worker-delta", {"kind": "delta", "path": str(out)}, items=5, max_items=2
    )
    last = max(item_of)
    dispatch.job_run(job=job)
    wait_until(
        lambda: Watermark.objects.get(job=job).value == last
        and not Batch.objects.filter(job=job, status__in=["queued", "running"]).exists(),
        timeout=180,
        message="the files-to-Delta batches",
    )
    assert rows_at(out) == expected_rows(range(5))
    assert DeltaTable(str(out)).version() + 1 == Batch.objects.filter(job=job).count() == 3
    assert_each_row_at_most_once_at_every_version(out)
    assert Asset.objects.filter(connector=job.connector).count() == 5
