"""DuckDB's own Delta reader (its `delta` extension), loaded offline for the tests.

DuckDB normally downloads the extension on first use; here it comes from PyPI
(`duckdb-ext-delta`, the extension build for the pinned `duckdb`), loaded by path with automatic
installs off, so a test never reaches the network. A missing extension is an error, not a skip.
"""

import os

import duckdb


def extension_path() -> str:
    import duckdb_ext  # namespace package of the duckdb-ext-* wheels

    platform = duckdb.execute("PRAGMA platform").fetchone()[0]
    for root in duckdb_ext.__path__:
        path = os.path.join(
            root, "extensions", f"v{duckdb.__version__}", platform, "delta.duckdb_extension"
        )
        if os.path.exists(path):
            return path
    raise RuntimeError(f"no DuckDB delta extension for duckdb {duckdb.__version__} on {platform}")


def connect() -> "duckdb.DuckDBPyConnection":
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute(f"LOAD '{extension_path()}'")
    return con


def rows_at(path, columns: list[str], version: int | None = None) -> list[tuple]:
    """The table's rows at `version` (the latest when None) as DuckDB's Delta reader sees them,
    sorted, duplicates kept."""
    con = connect()
    try:
        selected = ", ".join(f'"{c}"' for c in columns)
        if version is None:
            return sorted(
                con.execute(f"SELECT {selected} FROM delta_scan(?)", [str(path)]).fetchall()
            )
        con.execute(f"ATTACH '{path}' AS t (TYPE delta, VERSION {int(version)})")
        return sorted(con.execute(f"SELECT {selected} FROM t").fetchall())
    finally:
        con.close()
