"""Delta tables in tests: every version read back with delta-rs and DuckDB's own reader
(`rows_at`, `versions`, `assert_each_row_at_most_once_at_every_version`), and a Delta-to-Delta
job over a `delta` connector with the restatement backfills Tidemark made for it."""

from deltalake import DeltaTable

from inventory.models import Backfill
from inventory.services import discovery
from inventory.services.connectors import connector_create
from inventory.services.jobs import job_create
from tests.support import duckdb_delta


def versions(path) -> list[list[tuple]]:
    """Every version of the table, oldest first, as sorted (key, v) rows."""
    latest = DeltaTable(str(path)).version()
    return [rows_at(path, v) for v in range(latest + 1)]


def rows_at(path, version=None) -> list[tuple]:
    table = DeltaTable(str(path), version=version).to_pyarrow_table()
    return sorted(zip(table.column("key").to_pylist(), table.column("v").to_pylist(), strict=True))


def assert_each_row_at_most_once_at_every_version(path, columns=("key", "v")) -> None:
    """Read with delta-rs and with DuckDB's own Delta reader, each version holds each row at
    most once, and both readers see the same rows."""
    for version in range(DeltaTable(str(path)).version() + 1):
        table = DeltaTable(str(path), version=version).to_pyarrow_table()
        rows = sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
        assert len(rows) == len(set(rows)), f"a row twice at version {version}"
        assert duckdb_delta.rows_at(path, list(columns), version) == rows, f"version {version}"


def _delta_job(name: str, source: str, sink: str, **options):
    connector = connector_create(name=f"{name}-src", kind="delta", config={"path": source})
    discovery.discover(connector)
    return job_create(
        name=name,
        connector=connector,
        batch_weight=10**12,
        max_items=options.pop("max_items", 2),
        sink={"kind": "delta", "path": sink},
        retry_backoff_seconds=0,
        max_attempts=10,
        **options,
    )


def _restatements(job):
    return list(Backfill.objects.filter(job=job, created_by="tidemark").order_by("id"))
