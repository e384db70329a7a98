"""Iceberg tables in tests: a sink on a SQLite catalog under the test's directory
(`iceberg_sink`), and every snapshot read back with pyiceberg and DuckDB's own reader, which must
agree (`snapshots`, `latest_rows`, `assert_each_row_*_at_every_snapshot`)."""

from tests.support import duckdb_iceberg
from tests.support.files_job import expected_rows
from workers.spark.iceberg_catalog import catalog_from


def iceberg_sink(tmp_path, table: str = "out.t", **extra) -> dict:
    return {
        "kind": "iceberg",
        "catalog_uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": str(tmp_path / "warehouse"),
        "table": table,
        **extra,
    }


def load(sink: dict):
    return catalog_from(sink).load_table(tuple(sink["table"].split(".")))


def snapshots(sink: dict, columns=("key", "v")) -> list[list[tuple]]:
    """Every snapshot of the table, oldest first, as sorted rows; pyiceberg's and DuckDB's reads
    must agree at each."""
    table = load(sink)
    seen = []
    for snapshot in table.snapshots():
        arrow = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        rows = sorted(zip(*(arrow.column(c).to_pylist() for c in columns), strict=True))
        duck = duckdb_iceberg.rows_at(table.metadata_location, list(columns), snapshot.snapshot_id)
        assert duck == rows, f"DuckDB and pyiceberg differ at snapshot {snapshot.snapshot_id}"
        seen.append(rows)
    return seen


def assert_each_row_at_most_once_at_every_snapshot(sink: dict, columns=("key", "v")) -> None:
    for i, rows in enumerate(snapshots(sink, columns)):
        assert len(rows) == len(set(rows)), f"a row twice at snapshot {i}"


def assert_each_row_exactly_once_at_every_snapshot(sink: dict, items: int) -> None:
    """At every snapshot each source item's rows are there once, in full, or not yet at all; once
    every item is there, every later snapshot holds every item (a replay or backfill replaces
    rows in the snapshot that removes the old ones: no snapshot misses or repeats one)."""
    complete = False
    for i, rows in enumerate(snapshots(sink)):
        present = sorted({key // 100 for key, _ in rows})
        assert rows == expected_rows(present), f"snapshot {i}: a row twice, or an item in part"
        if complete:
            assert present == list(range(items)), f"snapshot {i} lost rows"
        complete = present == list(range(items))
    assert complete, "the last snapshot misses rows"


def latest_rows(sink: dict) -> list[tuple]:
    return snapshots(sink)[-1]
