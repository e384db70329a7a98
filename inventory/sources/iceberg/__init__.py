"""`iceberg` connectors: an Apache Iceberg table whose items are its snapshots, in commit order.

    {"catalog_uri": "sqlite:////data/lake/catalog.db", "table": "sales.orders"}
    {"catalog_dsn_env": "LAKE_CATALOG_DSN", "warehouse": "/data/lake", "table": "sales.orders"}

Its `SourceKind` object is `kind.py` (the hooks: discover, after_discover, read_spec, confine,
identity_changes). The table is found through pyiceberg's SQL catalog (workers/spark/iceberg_catalog.py; config.py
checks where it may lie). Discovery (discovery.py) registers each snapshot of the current branch
after the connector's cursor (the last registered snapshot) as an asset, under the connector's
row lock with the cursor in the same transaction: location `<namespace.name>@<snapshot id>`,
weight = the bytes it added (`added-files-size` of its summary), extra {"snapshot", "sequence",
"operation", "rows", "files"}. A snapshot exists only once its catalog commit is done, so nothing
in flight is ever registered.

A batch (read.py) reads the data files its snapshots added (from the manifests they wrote),
minus those a later overwrite or delete removed, directly or after a compaction moved them, with
the table's position deletes honoured: a restated snapshot reads only its rows still live. A
replace snapshot (a compaction) reads and restates nothing. Spark's executors read the files,
one partition each (workers/spark/sources/iceberg.py). Every file the metadata names is confined
to the table's location (workers/spark/iceberg_files.py).

An overwrite or delete snapshot that removes files (or deletes positions in files) that
registered snapshots added restates those snapshots, traced through compactions
(inventory/sources/delta/lineage.py, origins); `restatements.iceberg_restate`, run by the
kind's after_discover, then gives every job that committed them one backfill through the
restating snapshot (invariant 12), as for Delta versions.

A snapshot the table no longer holds (expired) is a batch error naming it and the way out: with
`"expired": "snapshot"` the batch reads the rows of its snapshots the table still holds
(docs/sources/iceberg.md).
"""

from inventory.sources.iceberg.config import validate
from inventory.sources.iceberg.discovery import discover
from inventory.sources.iceberg.read import read_spec

__all__ = ["discover", "read_spec", "validate"]
