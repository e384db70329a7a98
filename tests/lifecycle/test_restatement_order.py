"""Restatements go first (issue 43, item 1; docs/guarantees.md): a batch whose items restate
outputs the job has not rebuilt yet waits for that rebuild, in the incremental planner and at the
publish fence, so no sink ever holds a row twice at any version a reader can read.

The race of production (discovery registers a version that removes rows, the restatement step
runs a few milliseconds later, and a worker asks for the job's work in between) is reproduced
exactly: the version is registered, a worker asks, then the restatement step runs. Batches run in
this process through the real lifecycle and the real fence; after every publish the sink is read
(every Delta version with delta-rs and DuckDB; the files and PostgreSQL sinks after each publish).
The same race is run over a real Hudi table's instants (the sample tables of
tests/support/hudi_samples.py).
"""

from pathlib import Path

import pytest
from deltalake import DeltaTable

from inventory.models import Asset, Batch, BatchStatus, Connector
from inventory.services import lifecycle, restatements
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create
from inventory.services.corrections import watermark_correct
from inventory.services.jobs import job_create
from inventory.sources import delta as delta_source
from inventory.sources import hudi as hudi_source
from tests.support import duckdb_delta
from tests.support.files_job import run_and_commit, run_spark
from tests.support.restated_delta import (
    COLUMNS,
    STABLE,
    _assert_every_version,
    _changes,
    _delta_rows,
    _job,
    _seed,
    _source_rows,
)
from tests.support.sink_database import sink_cursor
from workers.spark import fence
from workers.spark.errors import BatchError

pytestmark = pytest.mark.django_db(transaction=True)


class Sinks:
    """Runs batches and reads every sink state a reader could see: after each publish."""

    def __init__(self, spark, check):
        self.spark = spark
        self.check = check  # called after every commit

    def run(self, batch: Batch) -> None:
        run_and_commit(self.spark, batch)
        self.check()

    def drain(self, job) -> None:
        while (batch := lifecycle.batch_acquire(job=job, worker="test")) is not None:
            self.run(batch)

    def race(
        self, job, *, discover=delta_source.discover, restate=restatements.delta_restate
    ) -> None:
        """Discovery registers the new versions; a worker asks for the job's work before the
        restatement step runs; then the restatement step and the rest of the work."""
        connector = Connector.objects.get(pk=job.connector_id)
        discover(connector)
        batch = lifecycle.batch_acquire(job=job, worker="racer")
        if batch is not None:
            self.run(batch)
        restate(Connector.objects.get(pk=job.connector_id))
        self.drain(job)


def test_a_delta_chain_never_holds_a_row_twice_at_any_version(spark, tmp_path):
    """source -> A (Delta sink) -> B (a delta connector on A, Delta sink). While the source
    deletes, updates, overwrites a partition, compacts and deletes again, and then A is replayed
    and backfilled, every version of A and of B holds each row at most once and never loses the
    rows of the untouched partition; at the end both hold the source's rows exactly once."""
    source, a, b = str(tmp_path / "s"), tmp_path / "a", tmp_path / "b"
    _seed(source)
    up = _job("order-a", source, {"kind": "delta", "path": str(a)})
    sinks = Sinks(spark, lambda: None)
    sinks.race(up)
    down = _job("order-b", str(a), {"kind": "delta", "path": str(b)})
    sinks.race(down)
    assert _delta_rows(b, None) == _source_rows(source)

    def step():
        sinks.race(up)
        sinks.race(down)

    _changes(source, step)
    assert _delta_rows(a, None) == _delta_rows(b, None) == _source_rows(source)

    # an upstream replay of A's last output, then a backfill over all of A's items
    live = Batch.objects.filter(job=up, published_attempt__isnull=False, replaced_by=None)
    boundary = max(span.lower for span in live.values_list("span", flat=True))
    watermark_correct(job=up, value=boundary - 1, actor="a", reason="fix", replay=True)
    sinks.drain(up)
    sinks.race(down)
    ids = sorted(Asset.objects.filter(connector=up.connector).values_list("id", flat=True))
    backfill_create(job=up, range_start=ids[0], range_end=ids[-1], reason="rewrite")
    sinks.drain(up)
    sinks.race(down)

    for table in (a, b):
        _assert_every_version(table, source=source)
    assert _delta_rows(a, None) == _delta_rows(b, None) == _source_rows(source)
    # the restatements happened (the chain was really exercised at both hops)
    assert Batch.objects.filter(job=down, backfill__created_by="tidemark").count() >= 4


def _files_rows(spark, path: Path) -> list[tuple]:
    if not list(path.glob("batch_id=*")):
        return []
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).select(*COLUMNS).collect())


def _table_rows(table: str) -> list[tuple]:
    with sink_cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [f'"{table}"'])
        if cursor.fetchone()[0] is None:
            return []
        cursor.execute(f'SELECT key, v, p FROM "{table}" ORDER BY key')
        return sorted(cursor.fetchall())


def test_a_files_sink_and_an_upsert_sink_never_hold_a_row_twice_after_any_publish(
    spark,
    tmp_path,
    sink_dsn,
):
    """The same changes with a files sink and a PostgreSQL upsert sink on one Delta source: after
    every publish of either job the files sink holds exactly the rows of some source version,
    the upsert table each key once with a value the source had, and neither loses the untouched
    partition."""
    source, out = str(tmp_path / "s"), tmp_path / "files"
    _seed(source)
    files = _job("order-files", source, {"kind": "files", "path": str(out), "format": "parquet"})
    upsert = _job(
        "order-upsert",
        source,
        {"kind": "postgres", "dsn_env": sink_dsn, "table": "order_upsert", "key": ["key"]},
    )
    ever = set(_source_rows(source))
    snapshots = [_delta_rows(source, v) for v in range(DeltaTable(source).version() + 1)]
    seen = {"files": False, "upsert": False}

    def check():
        for name, rows in (
            ("files", _files_rows(spark, out)),
            ("upsert", _table_rows("order_upsert")),
        ):
            assert len(rows) == len(set(rows)), f"the {name} sink holds a row twice: {rows}"
            keys = [row[0] for row in rows]
            assert len(keys) == len(set(keys)), f"the {name} sink holds a key twice: {rows}"
            assert set(rows) <= ever, f"the {name} sink holds a row the source never had"
            has_stable = all(row in rows for row in STABLE)
            assert has_stable or not seen[name], f"the {name} sink lost committed rows"
            seen[name] = seen[name] or has_stable
        files_rows = _files_rows(spark, out)
        assert not files_rows or files_rows in snapshots, "the files sink is no source version"

    sinks = Sinks(spark, check)

    def step():
        ever.update(_source_rows(source))
        snapshots.append(_source_rows(source))
        sinks.race(files)
        sinks.race(upsert)

    step()
    _changes(source, step)
    assert _files_rows(spark, out) == _source_rows(source)
    # upsert keeps keys the source deleted (no per-row owner); every live row is there, newest
    live = _source_rows(source)
    assert [r for r in _table_rows("order_upsert") if r[0] in {k for k, _, _ in live}] == live


def test_the_fence_makes_a_batch_over_a_restating_version_wait_for_the_restatement(
    spark, tmp_path, monkeypatch
):
    """A batch planned over a version that restates outputs (here an operator's backfill over it)
    may not publish while those outputs are not rebuilt: the fence answers TM425 and asks again,
    and past its wait the attempt fails naming them; once the restatement has published it lets
    the batch through."""
    source, out = str(tmp_path / "s"), tmp_path / "out"
    _seed(source)
    job = _job("order-fence", source, {"kind": "delta", "path": str(out)})
    sinks = Sinks(spark, lambda: None)
    sinks.race(job)
    DeltaTable(source).delete("key = 2")
    connector = Connector.objects.get(pk=job.connector_id)
    delta_source.discover(connector)
    restating = Asset.objects.get(connector=connector, extra__version=2)
    version_0 = Asset.objects.get(connector=connector, extra__version=0)
    assert restating.extra["restates"] == [version_0.pk]
    # the incremental planner waits: nothing to take before the restatement step
    assert lifecycle.batch_acquire(job=job, worker="racer") is None

    backfill_create(job=job, range_start=restating.pk, range_end=restating.pk, reason="early")
    early = lifecycle.batch_acquire(job=job, worker="racer")
    assert (early.span.lower, early.span.upper) == (restating.pk, restating.pk + 1)
    # the fence answers TM425 and asks again; past its wait the attempt fails, naming the output
    monkeypatch.setattr(fence, "RESTATEMENT_WAIT_SECONDS", 0.5)
    stale = Batch.objects.get(job=job, span__contains=version_0.pk, backfill=None)
    with pytest.raises(BatchError) as waits:
        run_spark(spark, early)
    assert waits.value.type == "WaitsForRestatement"
    assert f"its item {restating.pk} restates items whose output (batch {stale.pk})" in str(
        waits.value
    )
    assert DeltaTable(str(out)).version() == 1  # nothing published
    restatements.delta_restate(connector)
    rebuild = lifecycle.batch_acquire(job=job, worker="test")
    assert rebuild.backfill.created_by == "tidemark"
    sinks.run(rebuild)
    sinks.run(early)  # the fence lets it through now
    sinks.drain(job)
    _assert_every_version(out)
    assert _delta_rows(out, None) == _source_rows(source)


def test_a_job_output_chain_never_holds_an_upstream_row_twice_after_any_publish(spark, tmp_path):
    """files -> up (files sink) -> middle (job_output, files sink). An upstream backfill replaces
    two commits; a worker asks for middle's work before the restatement step has run (the
    after-commit step of the upstream commit, here held back): middle takes nothing over the
    replacing commits until its rebuild published, and after every publish its sink holds each
    upstream row exactly once."""
    from inventory.services.signals import batch_committed
    from tests.support.job_chain import downstream_job, expected, file_rows, upstream_job

    up = upstream_job(tmp_path, "order-up", items=4)
    out = tmp_path / "middle"
    middle = downstream_job("order-middle", up, {"kind": "files", "path": str(out)}, max_items=2)

    def check():
        rows = file_rows(spark, out)
        assert rows in ([], *(expected(range(n)) for n in range(1, 5))), rows

    sinks = Sinks(spark, check)
    sinks.drain(up)
    sinks.drain(middle)
    assert file_rows(spark, out) == expected(range(4))

    first = Asset.objects.filter(connector=up.connector).order_by("pk")[1].pk
    backfill_create(job=up, range_start=first, range_end=first + 1, reason="fix", actor="a")
    batch_committed.disconnect(dispatch_uid="tidemark-upstream-restate")
    try:
        sinks.drain(up)
    finally:
        batch_committed.connect(
            restatements._after_commit, dispatch_uid="tidemark-upstream-restate"
        )
    replacing = list(Batch.objects.filter(job=up, backfill__isnull=False).order_by("commit_seq"))
    assert len(replacing) == 2
    assert lifecycle.batch_acquire(job=middle, worker="racer") is None  # it waits
    for batch in replacing:
        restatements.upstream_restate(batch.pk)
    sinks.drain(middle)
    assert file_rows(spark, out) == expected(range(4))
    assert Batch.objects.filter(job=middle, backfill__created_by="tidemark").count() == 1


@pytest.mark.parametrize(
    "name", ["sample_table/cow/v9_txns_simple_meta", "sample_table/mor/avro/v9_txns_simple_meta"]
)
def test_a_delta_sink_fed_by_a_hudi_source_never_holds_a_key_twice_at_any_version(
    spark, tmp_path, name
):
    """A real Hudi table (partitioned; copy-on-write, and merge-on-read with a compaction)
    replayed instant by instant into a job with a Delta sink, with the race of production at
    every instant: its updates, deletes and insert overwrite restate earlier instants and record
    them (`extra.restates`), so the worker asking before the restatement step gets nothing, and
    the restatement publishes the old rows' removal and the new rows together. Every version of
    the sink, read with delta-rs and DuckDB, holds each key once and is exactly the table as it
    was after one of its instants."""
    from tests.support.hudi_samples import (
        TXNS_SIMPLE_META,
        TXNS_SIMPLE_META_MOR,
        Timeline,
        _apply,
        sample,
    )

    columns = ["txn_id", "txn_ts"]
    table = sample(tmp_path, name)
    steps = TXNS_SIMPLE_META_MOR if "/mor/" in name else TXNS_SIMPLE_META
    timeline = Timeline(table)
    out = tmp_path / "out"
    connector = connector_create(name="order-hudi-src", kind="hudi", config={"path": str(table)})
    job = job_create(
        name="order-hudi",
        connector=connector,
        batch_weight=10**12,
        max_items=1,
        sink={"kind": "delta", "path": str(out)},
        retry_backoff_seconds=0,
        max_attempts=5,
    )
    sinks = Sinks(spark, lambda: None)
    state: dict = {}
    states = [[]]  # the table after each instant, as the SQL that wrote it says
    for number, step in enumerate(steps, start=1):
        stamp = timeline.advance()
        state = _apply(state, step)
        states.append(sorted(state.items()))
        sinks.race(job, discover=hudi_source.discover, restate=restatements.hudi_restate)
        assert _sink_rows(out, columns, None) == states[-1], f"after instant {number}"
        item = Asset.objects.get(connector=connector, extra__instant=stamp)
        [published] = Batch.objects.filter(
            job=job, span__contains=item.pk, status=BatchStatus.SUCCEEDED, replaced_by=None
        )
        # a restating instant reaches the sink with its restatement, in one publish
        by_restatement = (
            published.backfill is not None and published.backfill.created_by == "tidemark"
        )
        assert by_restatement == ("restates" in item.extra), f"instant {number}"

    for version in range(DeltaTable(str(out)).version() + 1):
        rows = _sink_rows(out, columns, version)
        keys = [key for key, _ in rows]
        assert len(keys) == len(set(keys)), f"a key twice at version {version}: {rows}"
        assert duckdb_delta.rows_at(out, columns, version) == rows, f"version {version}"
        assert rows in states, f"version {version} is no state of the table: {rows}"

    w = timeline.writes
    restating = {
        a.extra["instant"]: sorted(
            Asset.objects.filter(pk__in=a.extra["restates"]).values_list(
                "extra__instant", flat=True
            )
        )
        for a in Asset.objects.filter(connector=connector, extra__has_key="restates")
    }
    assert restating == {
        w[1]: [w[0]],  # update of TXN-001
        w[2]: [w[0], w[1]],  # delete of TXN-002 in the same file group
        w[3]: [w[0]],  # update of TXN-005 (eu)
        w[4]: [w[0], w[3]],  # its delete
        w[5]: [w[0]],  # update of TXN-007 (apac)
        w[7]: [w[0], w[3], w[4], w[6]],  # insert overwrite of eu: both eu file groups
    }


def _sink_rows(path, columns: list[str], version) -> list[tuple]:
    data = DeltaTable(str(path), version=version).to_pyarrow_table()
    return sorted(zip(*(data.column(c).to_pylist() for c in columns), strict=True))
