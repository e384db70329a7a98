"""An Iceberg table's snapshots as Tidemark reads them: the current branch in commit order, and
what each snapshot added and removed, from its own manifests.

A snapshot's manifests that it wrote itself (`added_snapshot_id`) hold an entry for every file it
added (status ADDED) or removed (status DELETED); the table's metadata holds the rest. Each file
is confined to the table's location before anything reads it (workers/spark/iceberg_files.py),
the manifest list and the manifests included.

The files a snapshot added and removed are given as the actions of a Delta commit
(`{"add" | "remove": {"path", "dataChange", "partitionValues"}}`), so that the lineage of files
through compactions is the one of inventory/sources/delta/lineage.py: an append, overwrite or
delete changes data; a replace (compaction, `rewrite_data_files`) moves rows without changing
them. A position delete file a snapshot added removes rows of the data files it names: for
restatements (`with_deletes`) those data files count as removed by it; a read keeps them and
drops the deleted positions instead.
"""

from dataclasses import dataclass, field

from workers.spark.iceberg_files import confined

NO_DATA_CHANGE = ("replace",)


@dataclass
class Changes:
    """What one snapshot changed (file paths as its metadata writes them)."""

    added: list = field(default_factory=list)  # DataFile of the data files it added
    removed: list = field(default_factory=list)  # DataFile of the data files it removed
    position_deletes: list = field(default_factory=list)  # DataFile of position delete files
    equality_deletes: list = field(default_factory=list)


def operation(snapshot) -> str:
    summary = snapshot.summary
    op = getattr(summary, "operation", None) if summary is not None else None
    return str(getattr(op, "value", op) or "append")


def summary_int(snapshot, key: str) -> int:
    summary = snapshot.summary
    try:
        return int(summary[key]) if summary is not None and summary.get(key) else 0
    except (TypeError, ValueError, KeyError):
        return 0


def chain(table) -> list:
    """The current branch's snapshots still in the metadata, oldest first: the current one and
    its parents until one the metadata no longer holds (expired)."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    found, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        found.append(snapshot)
        snapshot = by_id.get(snapshot.parent_snapshot_id)
    return found[::-1]


def changes(table, snapshot, *, name: str) -> Changes:
    """The files `snapshot` added and removed, read from the manifests it wrote."""
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    location = table.metadata.location
    sid = snapshot.snapshot_id
    confined(location, snapshot.manifest_list, table=name, snapshot=sid, what="manifest list")
    found = Changes()
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != sid:
            continue  # carried over from an earlier snapshot
        confined(location, manifest.manifest_path, table=name, snapshot=sid, what="manifest")
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != sid or entry.status == ManifestEntryStatus.EXISTING:
                continue
            data_file = entry.data_file
            confined(location, data_file.file_path, table=name, snapshot=sid, what="data file")
            added = entry.status == ManifestEntryStatus.ADDED
            if data_file.content == DataFileContent.DATA:
                (found.added if added else found.removed).append(data_file)
            elif added and data_file.content == DataFileContent.POSITION_DELETES:
                found.position_deletes.append(data_file)
            elif added and data_file.content == DataFileContent.EQUALITY_DELETES:
                found.equality_deletes.append(data_file)
    return found


def partition_key(data_file) -> str:
    return f"{data_file.spec_id}:{data_file.partition!r}"


def deleted_from(table, delete_file, *, name: str, snapshot: int) -> set[str]:
    """The data files whose rows a position delete file deletes (its `file_path` column)."""
    import pyarrow.parquet as pq

    path = confined(
        table.metadata.location,
        delete_file.file_path,
        table=name,
        snapshot=snapshot,
        what="position delete file",
    )
    column = pq.read_table(path, columns=["file_path"]).column("file_path")
    return set(column.unique().to_pylist())


def actions(
    table, snapshot, *, name: str, with_deletes: bool, found: Changes | None = None
) -> list[dict]:
    """The snapshot's changes (`found` when the caller read them already) as Delta actions (see
    the module's docstring)."""
    found = found or changes(table, snapshot, name=name)
    data_change = operation(snapshot) not in NO_DATA_CHANGE
    result = []
    for kind, files in (("add", found.added), ("remove", found.removed)):
        for data_file in files:
            result.append(
                {
                    kind: {
                        "path": data_file.file_path,
                        "dataChange": data_change,
                        "partitionValues": {"partition": partition_key(data_file)},
                    }
                }
            )
    if with_deletes:
        for delete_file in found.position_deletes:
            for path in sorted(
                deleted_from(table, delete_file, name=name, snapshot=snapshot.snapshot_id)
            ):
                result.append({"remove": {"path": path, "dataChange": True}})
    return result
