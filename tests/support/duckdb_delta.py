"""DuckDB's own Delta reader (its `delta` extension), loaded offline for the tests.

DuckDB normally downloads the extension on first use; here it comes from PyPI
(`duckdb-ext-delta`, the extension build for the pinned `duckdb`), loaded by path with automatic
installs off, so a test never reaches the network. A missing extension is an error, not a skip.
"""

import functools
import itertools
import os

import duckdb

_aliases = itertools.count()


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


@functools.cache
def connect() -> "duckdb.DuckDBPyConnection":
    """One connection per test process: loading the extension takes about a second."""
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute(f"LOAD '{extension_path()}'")
    return con


def rows_at(path, columns: list[str], version: int | None = None) -> list[tuple]:
    """The table's rows at `version` (the latest when None) as DuckDB's Delta reader sees them,
    sorted, duplicates kept."""
    con = connect().cursor()
    selected = ", ".join(f'"{c}"' for c in columns)
    if version is None:
        return sorted(con.execute(f"SELECT {selected} FROM delta_scan(?)", [str(path)]).fetchall())
    alias = f"t{next(_aliases)}"
    con.execute(f"ATTACH '{path}' AS {alias} (TYPE delta, VERSION {int(version)})")
    try:
        return sorted(con.execute(f"SELECT {selected} FROM {alias}").fetchall())
    finally:
        con.execute(f"DETACH {alias}")
