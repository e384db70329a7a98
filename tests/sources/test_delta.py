"""`delta` connectors (issue 22): a Delta table's versions are the items, read from their added
files; a Delta-to-Delta chain replays exactly once; a vacuumed version is an explicit error."""

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from inventory.models import Asset, Batch, BatchStatus
from inventory.services import discovery, lifecycle
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create
from inventory.services.corrections import watermark_correct
from inventory.services.errors import InvalidInput
from tests.support.delta_tables import (
    _delta_job,
    _restatements,
    assert_each_row_at_most_once_at_every_version,
    rows_at,
)
from tests.support.files_job import drain, expected_rows, make_files_job
from workers import specs
from workers.spark.errors import BatchError
from workers.spark.run import run_batch

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(keys, v="x"):
    return pa.table(
        {"key": pa.array(keys, pa.int64()), "v": pa.array([v] * len(keys), pa.string())}
    )


def test_a_path_that_is_not_a_delta_table_or_an_unknown_key_is_a_400(tmp_path):
    with pytest.raises(InvalidInput) as refused:
        connector_create(name="not-delta", kind="delta", config={"path": str(tmp_path)})
    assert (refused.value.field, "not a Delta table" in str(refused.value)) == (
        "config.path",
        True,
    )
    write_deltalake(str(tmp_path / "t"), _rows([1]))
    with pytest.raises(InvalidInput) as refused:
        connector_create(
            name="typo", kind="delta", config={"path": str(tmp_path / "t"), "format": "x"}
        )
    assert refused.value.field == "config.format"


def test_versions_are_registered_in_commit_order_with_their_added_bytes_and_rows(tmp_path):
    table = str(tmp_path / "t")
    write_deltalake(table, _rows([1, 2]))
    write_deltalake(table, _rows([3]), mode="append")
    connector = connector_create(name="versions", kind="delta", config={"path": table})
    assert discovery.discover(connector) == 2
    write_deltalake(table, _rows([4, 5, 6]), mode="append")
    assert discovery.discover(connector) == 1
    assert discovery.discover(connector) == 0
    assets = list(Asset.objects.filter(connector=connector).order_by("id"))
    assert [(a.extra["version"], a.extra["rows"]) for a in assets] == [(0, 2), (1, 1), (2, 3)]
    assert all(a.weight > 0 for a in assets)
    assert [a.location for a in assets] == [f"{table}@v{v}" for v in range(3)]
    assert connector.cursor == {"version": 2}


def test_an_upstream_replay_and_backfill_restate_a_delta_chain_by_themselves(spark, tmp_path):
    """Invariant 12 across Delta tables: up (files -> Delta A) -> mid (A -> Delta B) -> down
    (B -> Delta C). An upstream replay, then an upstream backfill, each make a version of A that
    removes the files earlier versions added; mid's discovery restates exactly the versions it
    committed them from, its rebuild makes a version of B that does the same to down, and every
    table shows each row at most once at every version, exactly once at the end."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    up, _ = make_files_job(tmp_path, "chain-up", {"kind": "delta", "path": str(a)}, items=4)
    drain(spark, up)  # versions 0, 1 of A: two batches of two files
    mid = _delta_job("chain-mid", str(a), str(b), max_items=1)
    drain(spark, mid)  # versions 0, 1 of B
    down = _delta_job("chain-down", str(b), str(c), max_items=1)
    drain(spark, down)
    assert rows_at(c) == expected_rows(range(4))

    # an upstream replay of its second batch: version 2 of A removes version 1's files
    second = Batch.objects.filter(job=up, status=BatchStatus.SUCCEEDED).order_by("span")[1]
    watermark_correct(job=up, value=second.span.lower - 1, actor="a", reason="fix", replay=True)
    drain(spark, up)
    assert discovery.discover(mid.connector) == 1
    restated = Asset.objects.get(connector=mid.connector, extra__version=1)
    restating = Asset.objects.get(connector=mid.connector, extra__version=2)
    assert restating.extra["restates"] == [restated.pk]
    [backfill] = _restatements(mid)
    # one batch from the restated version through the version restating it
    assert (backfill.range_start, backfill.range_end, backfill.priority) == (
        restated.pk,
        restating.pk,
        1,
    )
    assert backfill.batches.count() == 1
    assert "removed files of versions 1" in backfill.reason
    assert "restate" not in mid.connector.cursor
    drain(spark, mid)  # version 1 rebuilt (nothing live) with version 2 (its rows): one publish
    assert Batch.objects.get(job=mid, backfill=None, span__contains=restating.pk).status == (
        BatchStatus.SKIPPED
    )
    assert discovery.discover(down.connector) == 1
    assert len(_restatements(down)) == 1
    drain(spark, down)

    # an upstream backfill over everything: version 3 of A removes versions 0's and 2's files
    ids = sorted(Asset.objects.filter(connector=up.connector).values_list("id", flat=True))
    backfill_create(job=up, range_start=ids[0], range_end=ids[-1], reason="rewrite")
    drain(spark, up)
    discovery.discover(mid.connector)
    assert _restatements(mid)[-1].reason.endswith("versions 0, 2")
    drain(spark, mid)
    discovery.discover(down.connector)
    drain(spark, down)
    assert discovery.discover(mid.connector) == discovery.discover(down.connector) == 0

    for table in (a, b, c):
        assert_each_row_at_most_once_at_every_version(table)
        assert rows_at(table) == expected_rows(range(4))
    assert len(_restatements(down)) == 2


def test_a_delete_by_another_writer_restates_the_version_it_changed_and_optimize_does_not(
    spark, tmp_path
):
    table, out = str(tmp_path / "t"), tmp_path / "out"
    write_deltalake(table, _rows([1, 2]))
    write_deltalake(table, _rows([3, 4]), mode="append")
    job = _delta_job("deleted", table, str(out), max_items=1)
    drain(spark, job)
    assert rows_at(out) == [(k, "x") for k in (1, 2, 3, 4)]

    # version 2 rewrites version 1's file without key 3: version 1 is restated and reads
    # nothing live, version 2 brings the row that stays
    DeltaTable(table).delete("key = 3")
    assert discovery.discover(job.connector) == 1
    [backfill] = _restatements(job)
    version_1 = Asset.objects.get(connector=job.connector, extra__version=1)
    version_2 = Asset.objects.get(connector=job.connector, extra__version=2)
    assert (backfill.range_start, backfill.range_end, backfill.priority) == (
        version_1.pk,
        version_2.pk,
        1,
    )
    drain(spark, job)
    assert rows_at(out) == [(k, "x") for k in (1, 2, 4)]

    # a file added and removed between two looks was never read; a compaction moves rows
    # without changing them: neither restates anything
    write_deltalake(table, _rows([5]), mode="append")
    DeltaTable(table).delete("key = 5")
    DeltaTable(table).optimize.compact()
    assert discovery.discover(job.connector) == 3
    assert len(_restatements(job)) == 1
    drain(spark, job)
    assert_each_row_at_most_once_at_every_version(out)
    assert rows_at(out) == [(k, "x") for k in (1, 2, 4)]


def test_a_version_whose_files_were_vacuumed_fails_the_batch_naming_it(spark, tmp_path):
    table = str(tmp_path / "t")
    write_deltalake(table, _rows([1, 2]))
    write_deltalake(table, _rows([3]), mode="append")
    job = _delta_job("vacuumed", table, str(tmp_path / "out"), max_items=1)
    # compaction moves the rows into a new file (no data change); VACUUM deletes the originals
    DeltaTable(table).optimize.compact()
    DeltaTable(table).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    with pytest.raises(BatchError, match="version 0 of the Delta table .* was vacuumed"):
        run_batch(spark, specs.batch_spec(batch=batch))


def test_a_partitioned_table_is_read_with_its_typed_partition_columns(spark, tmp_path):
    table = str(tmp_path / "t")
    data = _rows([1, 2, 3]).append_column("day", pa.array([1, 1, 2], pa.int32()))
    write_deltalake(table, data, partition_by=["day"])
    job = _delta_job("partitioned", table, str(tmp_path / "out"))
    batch = lifecycle.batch_acquire(job=job, worker="w")
    spec = specs.batch_spec(batch=batch)
    assert len(spec["source"]["files"]) == 2
    result = run_batch(spark, spec)
    assert result["rows_out"] == 3
    out = DeltaTable(str(tmp_path / "out")).to_pyarrow_table()
    assert out.schema.field("day").type == pa.int32()
    assert sorted(
        zip(out.column("key").to_pylist(), out.column("day").to_pylist(), strict=False)
    ) == [
        (1, 1),
        (2, 1),
        (3, 2),
    ]


def test_a_version_cleaned_from_the_log_is_an_error_naming_it(tmp_path):
    table = tmp_path / "t"
    write_deltalake(str(table), _rows([1]))
    write_deltalake(str(table), _rows([2]), mode="append")
    DeltaTable(str(table)).create_checkpoint()
    (table / "_delta_log" / f"{0:020d}.json").unlink()  # what log cleanup does after a checkpoint
    connector = connector_create(name="cleaned", kind="delta", config={"path": str(table)})
    with pytest.raises(InvalidInput, match="version 0 of the Delta table .* no longer in its log"):
        discovery.discover(connector)
    assert Asset.objects.filter(connector=connector).count() == 0
