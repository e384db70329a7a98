"""What the worker reads for one batch of an `iceberg` connector: the data files its snapshots
added and no later data-changing snapshot removed, with the position deletes the table holds."""

from inventory.models import Asset, Batch, Connector
from inventory.services.errors import InvalidInput
from inventory.sources.delta import lineage
from inventory.sources.iceberg import snapshots as history
from inventory.sources.iceberg.config import open_table
from workers.spark.errors import ReadError
from workers.spark.iceberg_files import confined


def _spark_schema(table) -> str:
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow = schema_to_pyarrow(table.schema(), include_field_ids=False)
    return from_arrow_schema(arrow, prefer_timestamp_ntz=False).json()


def _columns(table) -> list[dict]:
    """The current schema's top-level columns by field id, with every name the table's name
    mapping gives that id (older names of a renamed column): the executors take a column from a
    data file by its field id, or, in a file written without ids, by one of these names."""
    mapping = table.metadata.name_mapping()
    names: dict[int, list[str]] = {}
    for mapped in mapping or []:
        if mapped.field_id is not None:
            names[mapped.field_id] = list(mapped.names)
    return [
        {"name": f.name, "id": f.field_id, "names": names.get(f.field_id, [f.name])}
        for f in table.schema().fields
    ]


def _expired(name: str, snapshot: int) -> InvalidInput:
    return InvalidInput(
        "config.table",
        f"snapshot {snapshot} of the Iceberg table {name} is no longer in the table (expired, "
        "its files may be deleted): the rows it added cannot be read incrementally. The way out "
        'is a snapshot backfill: set the connector\'s config.expired to "snapshot" and retry, '
        "and the batch reads the rows of its snapshots that the table still holds",
    )


def live_files(table, *, name: str) -> tuple[list, list]:
    """(live data file entries, live delete files) of the current snapshot."""
    from pyiceberg.manifest import DataFileContent

    current = table.current_snapshot()
    if current is None:
        return [], []
    location = table.metadata.location
    sid = current.snapshot_id
    confined(location, current.manifest_list, table=name, snapshot=sid, what="manifest list")
    data, deletes = [], []
    for manifest in current.manifests(table.io):
        confined(location, manifest.manifest_path, table=name, snapshot=sid, what="manifest")
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            file = entry.data_file
            confined(location, file.file_path, table=name, snapshot=entry.snapshot_id, what="file")
            (data if file.content == DataFileContent.DATA else deletes).append(entry)
    return data, deletes


def read_spec(*, connector: Connector, batch: Batch) -> dict:
    config = connector.config
    name = config["table"]
    extras = list(
        Asset.objects.filter(connector=connector, id__gte=batch.span.lower, id__lt=batch.span.upper)
        .order_by("id")
        .values_list("extra", flat=True)
    )
    wanted = [extra["snapshot"] for extra in extras]
    for extra in extras:
        if extra.get("untraceable"):
            raise InvalidInput(
                "config.table",
                f"snapshot {extra['snapshot']} of the Iceberg table {name} cannot be read "
                f"exactly once: {extra['untraceable']}",
            )
    table = open_table(config)
    chain = history.chain(table)
    index = {s.snapshot_id: i for i, s in enumerate(chain)}
    missing = [sid for sid in wanted if sid not in index]
    snapshot_read = bool(missing) and config.get("expired", "fail") == "snapshot"
    if missing and not snapshot_read:
        raise _expired(name, missing[0])
    try:
        live, deletes = live_files(table, name=name)
        if any(d.data_file.content.name == "EQUALITY_DELETES" for d in deletes):
            raise InvalidInput(
                "config.table",
                f"the Iceberg table {name} has equality delete files, which Tidemark cannot "
                "read: rewrite them into the data files (a compaction) and retry",
            )
        if snapshot_read:
            # the rows of the batch's snapshots that the table still holds
            files = [(e.snapshot_id, e.data_file) for e in live if e.snapshot_id in set(wanted)]
        else:
            files = _added_and_live(table, chain, [index[sid] for sid in wanted], name=name)
    except ReadError as exc:
        raise InvalidInput("config.table", str(exc)) from None
    deletes_by_partition: dict[str, list[str]] = {}
    for entry in deletes:
        key = history.partition_key(entry.data_file)
        deletes_by_partition.setdefault(key, []).append(entry.data_file.file_path)
    current = table.current_snapshot()
    return {
        "items": [f"{name}@{sid}" for sid in wanted],
        "source": {
            "kind": "iceberg",
            "table": name,
            "location": table.metadata.location,
            "snapshots": wanted,
            "as_of": current.snapshot_id if current else None,
            "files": [
                {
                    "path": data_file.file_path,
                    "snapshot": sid,
                    "format": str(data_file.file_format.value).lower(),
                    "deletes": deletes_by_partition.get(history.partition_key(data_file), []),
                }
                for sid, data_file in files
            ],
            "schema": _spark_schema(table),
            "columns": _columns(table),
        },
    }


def _added_and_live(table, chain: list, indexes: list[int], *, name: str) -> list:
    """(snapshot id, DataFile) of the files the snapshots at `indexes` added with a data change
    and no LATER data-changing snapshot removed, directly or after a compaction moved them. Each
    snapshot's files are checked against the snapshots after it only: a writer may put back a
    file an earlier snapshot removed, under its own path (the Iceberg sink's undo snapshot), and
    that file is live again from the snapshot that put it back."""
    if not indexes:
        return []
    wanted, start = set(indexes), min(indexes)
    added: dict[int, list] = {}
    later = []  # the actions of chain[start], chain[start + 1], ...
    for i in range(start, len(chain)):
        snapshot = chain[i]
        found = history.changes(table, snapshot, name=name)
        if i in wanted and history.operation(snapshot) not in history.NO_DATA_CHANGE:
            added[i] = [(snapshot.snapshot_id, f) for f in found.added]
        later.append(history.actions(table, snapshot, name=name, with_deletes=False, found=found))
    files = []
    for i, entries in sorted(added.items()):
        try:
            dead = lineage.dead_files([f.file_path for _, f in entries], later[i - start + 1 :])
        except lineage.Untraceable as exc:
            raise InvalidInput(
                "config.table", f"the Iceberg table {name} cannot be read exactly once: {exc}"
            ) from None
        files += [(sid, f) for sid, f in entries if f.file_path not in dead]
    return files
