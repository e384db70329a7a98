"""DuckDB's own Iceberg reader (its `iceberg` extension), loaded offline for the tests.

As for Delta (tests/support/duckdb_delta.py), the extension comes from PyPI (`duckdb-ext-iceberg`, with
`duckdb-ext-avro`, which it needs for the manifests), loaded by path with automatic installs
off, so a test never reaches the network. A missing extension is an error, not a skip.
"""

import functools
import os

import duckdb


def extension_path(name: str) -> str:
    import duckdb_ext  # namespace package of the duckdb-ext-* wheels

    platform = duckdb.execute("PRAGMA platform").fetchone()[0]
    for root in duckdb_ext.__path__:
        path = os.path.join(
            root, "extensions", f"v{duckdb.__version__}", platform, f"{name}.duckdb_extension"
        )
        if os.path.exists(path):
            return path
    raise RuntimeError(f"no DuckDB {name} extension for duckdb {duckdb.__version__} on {platform}")


@functools.cache
def connect() -> "duckdb.DuckDBPyConnection":
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute(f"LOAD '{extension_path('avro')}'")
    con.execute(f"LOAD '{extension_path('iceberg')}'")
    return con


def rows_at(metadata_location: str, columns: list[str], snapshot_id: int) -> list[tuple]:
    """The rows of snapshot `snapshot_id` of the table whose metadata file is given, as DuckDB's
    Iceberg reader sees them, sorted, duplicates kept."""
    selected = ", ".join(f'"{c}"' for c in columns)
    return sorted(
        connect()
        .cursor()
        .execute(
            f"SELECT {selected} FROM iceberg_scan(?, snapshot_from_id => ?)",
            [metadata_location, int(snapshot_id)],
        )
        .fetchall()
    )
