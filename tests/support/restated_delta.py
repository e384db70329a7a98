"""A partitioned Delta source whose writer restates it (deletes, updates, a partition overwrite,
a compaction: `_seed`, `_changes`), a Delta-to-Delta job over it (`_job`), and every version of
a Delta table checked: no row twice, the untouched partition never lost (`_assert_every_version`)."""

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from inventory.models import Connector
from inventory.services.connectors import connector_create
from inventory.services.jobs import job_create
from tests.support import duckdb_delta

COLUMNS = ("key", "v", "p")


# partition c is written once and never touched: its rows must be in every version once there
STABLE = [(30, "x", "c"), (31, "x", "c")]


def _write(table: str, rows: list[tuple], **options) -> None:
    keys, values, parts = zip(*rows, strict=True)
    write_deltalake(
        table,
        pa.table(
            {
                "key": pa.array(keys, pa.int64()),
                "v": pa.array(values, pa.string()),
                "p": pa.array(parts, pa.string()),
            }
        ),
        partition_by=["p"],
        **options,
    )


def _source_rows(table: str) -> list[tuple]:
    return _delta_rows(table, None)


def _delta_rows(path, version) -> list[tuple]:
    data = DeltaTable(str(path), version=version).to_pyarrow_table()
    return sorted(zip(*(data.column(c).to_pylist() for c in COLUMNS), strict=True))


def _job(name: str, source: str, sink: dict) -> object:
    connector = Connector.objects.filter(config__path=source, kind="delta").first()
    if connector is None:
        connector = connector_create(name=f"{name}-src", kind="delta", config={"path": source})
    return job_create(
        name=name,
        connector=connector,
        batch_weight=10**12,
        max_items=1,
        sink=sink,
        retry_backoff_seconds=0,
        max_attempts=5,
    )


def _assert_every_version(path, *, source: str | None = None, lossless: bool = True) -> None:
    """Each version, read with delta-rs and with DuckDB: no row twice, and (`lossless`) once the
    rows of the untouched partition arrived they are in every later version. With `source`: each
    version holds exactly the rows of some version of the source (nothing missing, nothing
    stale)."""
    seen_stable = False
    snapshots = []
    if source is not None:
        snapshots = [_delta_rows(source, v) for v in range(DeltaTable(source).version() + 1)]
    for version in range(DeltaTable(str(path)).version() + 1):
        rows = _delta_rows(path, version)
        assert len(rows) == len(set(rows)), f"{path} holds a row twice at version {version}"
        assert duckdb_delta.rows_at(path, list(COLUMNS), version) == rows, f"version {version}"
        has_stable = all(row in rows for row in STABLE)
        assert has_stable or not seen_stable or not lossless, (
            f"{path} lost committed rows at version {version}"
        )
        seen_stable = seen_stable or has_stable
        if snapshots:
            assert rows in snapshots, f"{path} at version {version} is no version of the source"


def _changes(table: str, step) -> None:
    """The source's own writer: a delete, an update, a partition overwrite, a compaction, a
    delete of compacted rows; `step()` after each."""
    DeltaTable(table).delete("key = 2")
    step()
    DeltaTable(table).update(updates={"v": "'u'"}, predicate="key = 10")
    step()
    _write(
        table, [(5, "x", "b"), (6, "y", "b"), (20, "x", "b")], mode="overwrite", predicate="p = 'b'"
    )
    step()
    DeltaTable(table).optimize.compact()
    step()
    DeltaTable(table).delete("key = 3")
    step()


def _seed(table: str) -> None:
    _write(table, [(1, "x", "a"), (2, "x", "a"), (3, "x", "a"), (5, "x", "b"), (7, "x", "b")])
    _write(table, [(10, "x", "a"), (11, "x", "a"), *STABLE], mode="append")
