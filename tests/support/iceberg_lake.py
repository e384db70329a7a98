"""An Iceberg table to read from: a SQLite catalog and a warehouse in a test's folder, written
with pyiceberg (the Iceberg source's tests and the hostile-input tests share it)."""

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog


def arrow_rows(keys, v="a"):
    return pa.table(
        {"key": pa.array(keys, pa.int64()), "v": pa.array([v] * len(keys), pa.string())}
    )


class Lake:
    """A SQLite catalog and a warehouse under `root`, with table `ns.t` of (key, v)."""

    def __init__(self, root):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.config = {"catalog_uri": f"sqlite:///{root}/catalog.db", "table": "ns.t"}
        self.catalog = SqlCatalog(
            "tidemark", uri=self.config["catalog_uri"], warehouse=f"file://{root}/warehouse"
        )
        self.catalog.create_namespace("ns")
        self.catalog.create_table("ns.t", schema=arrow_rows([1]).schema)

    @property
    def table(self):
        return self.catalog.load_table("ns.t")

    def snapshot_ids(self) -> list[int]:
        return [s.snapshot_id for s in self.table.snapshots()]
