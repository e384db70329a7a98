"""Compaction lineage of a `delta` source (issue 43, item 2): a version that removes files a
compaction (OPTIMIZE, `dataChange: false`) wrote restates the versions whose rows they hold, so
a sink never keeps the compacted rows twice nor the deleted ones; a removal that cannot be traced
fails the batch saying so."""

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from inventory.models import Asset, Batch, BatchStatus
from inventory.services import discovery, lifecycle
from inventory.sources.delta import lineage as delta_lineage
from tests.support.delta_tables import (
    _delta_job,
    _restatements,
    assert_each_row_at_most_once_at_every_version,
    rows_at,
)
from tests.support.files_job import drain, run_spark

pytestmark = pytest.mark.django_db(transaction=True)


def _append(table: str, keys) -> None:
    write_deltalake(
        table,
        pa.table({"key": pa.array(keys, pa.int64()), "v": pa.array(["x"] * len(keys))}),
        mode="append",
    )


def test_a_delete_after_optimize_restates_the_compacted_versions_and_keeps_each_row_once(
    spark, tmp_path
):
    table, out = str(tmp_path / "t"), tmp_path / "out"
    _append(table, [1, 2, 3])
    _append(table, [4, 5, 6])
    job = _delta_job("compacted", table, str(out), max_items=1)
    drain(spark, job)
    DeltaTable(table).optimize.compact()  # version 2: one file holding versions 0 and 1
    DeltaTable(table).delete("key = 2 OR key = 5")  # version 3 rewrites that file
    assert discovery.discover(job.connector) == 2
    versions = {a.extra["version"]: a.pk for a in Asset.objects.filter(connector=job.connector)}
    assert Asset.objects.get(pk=versions[3]).extra["restates"] == [versions[0], versions[1]]
    [backfill] = _restatements(job)
    assert (backfill.range_start, backfill.range_end) == (versions[0], versions[3])
    assert "removed files of versions 0, 1" in backfill.reason
    drain(spark, job)
    assert rows_at(out) == [(k, "x") for k in (1, 3, 4, 6)]
    assert_each_row_at_most_once_at_every_version(out)
    # every version a reader could see: the source's rows at one of its versions
    seen = [[k for k, _ in rows_at(out, v)] for v in range(DeltaTable(str(out)).version() + 1)]
    assert seen == [[1, 2, 3], [1, 2, 3, 4, 5, 6], [1, 3, 4, 6]]


def test_a_removal_of_some_files_of_a_compaction_fails_the_batch_saying_why(spark, tmp_path):
    """A compaction that wrote two files, of which a delete rewrites one: which version's rows
    each holds is not in the log, so the batch over the delete fails naming it (never a silent
    double or loss)."""
    table, out = str(tmp_path / "t"), tmp_path / "out"
    for first in range(0, 200, 50):
        _append(table, list(range(first, first + 50)))
    job = _delta_job("split", table, str(out), max_items=4)
    drain(spark, job)
    size = max(path.stat().st_size for path in (tmp_path / "t").glob("*.parquet"))
    DeltaTable(table).optimize.compact(target_size=2 * size + 100)  # two files of two each
    assert len(DeltaTable(table).file_uris()) == 2
    DeltaTable(table).delete("key = 3")
    discovery.discover(job.connector)
    deleting = Asset.objects.get(connector=job.connector, extra__version=5)
    assert "cannot be traced" in deleting.extra["untraceable"]
    batch = lifecycle.batch_acquire(job=job, worker="test")
    assert batch is not None
    with pytest.raises(Exception, match="cannot be read exactly once: version 5 removes a file"):
        run_spark(spark, batch)
    assert rows_at(out) == [(k, "x") for k in range(200)]  # nothing doubled, nothing lost
    assert Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).count() == 1


# ---- the lineage itself (pure) --------------------------------------------------------------


def _add(path, change=True, part=None):
    return {"add": {"path": path, "dataChange": change, "partitionValues": part or {}}}


def _remove(path, change=True, part=None):
    return {"remove": {"path": path, "dataChange": change, "partitionValues": part or {}}}


LOG = [
    [_add("a")],  # 0
    [_add("b")],  # 1
    [_remove("a", False), _remove("b", False), _add("ab", False)],  # 2: OPTIMIZE
    [_add("c")],  # 3
    [_remove("ab", False), _remove("c", False), _add("abc", False)],  # 4: OPTIMIZE again
    [_remove("abc"), _add("abc2")],  # 5: DELETE
]


def test_a_removal_is_traced_through_nested_compactions_to_the_versions_that_added_the_rows():
    found, untraceable = delta_lineage.origins(
        {"abc": 5}, start=5, actions_of=lambda v: LOG[v], gone=lambda *a: None
    )
    assert (found, untraceable) == ({5: {0, 1, 3}}, {})
    assert delta_lineage.dead_files(["a", "b", "c"], LOG) == {"a", "b", "c"}
    assert delta_lineage.dead_files(["a", "b", "c"], LOG[:5]) == set()  # compacted only


def test_compactions_are_told_apart_by_partition_and_a_partial_removal_is_untraceable():
    log = [
        [_add("a1", part={"p": "1"}), _add("a2", part={"p": "2"})],
        [_add("b1", part={"p": "1"}), _add("b2", part={"p": "2"})],
        [
            _remove("a1", False, {"p": "1"}),
            _remove("b1", False, {"p": "1"}),
            _add("x1", False, {"p": "1"}),
            _add("y1", False, {"p": "1"}),
            _remove("a2", False, {"p": "2"}),
            _remove("b2", False, {"p": "2"}),
            _add("x2", False, {"p": "2"}),
        ],
        [_remove("x2", part={"p": "2"})],  # a delete of partition 2: traceable
        [_remove("x1", part={"p": "1"})],  # one of partition 1's two files: not
    ]
    found, untraceable = delta_lineage.origins(
        {"x2": 3, "x1": 4}, start=4, actions_of=lambda v: log[v], gone=lambda *a: None
    )
    assert found == {3: {0, 1}}
    assert list(untraceable) == [4]
    assert delta_lineage.dead_files(["a2", "b2"], log) == {"a2", "b2"}
    with pytest.raises(delta_lineage.Untraceable, match="only some were removed"):
        delta_lineage.dead_files(["a1"], log)
