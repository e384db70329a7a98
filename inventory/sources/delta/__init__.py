"""`delta` connectors: a Delta Lake table whose items are its versions, in commit order.

    {"path": "/data/orders_delta", "lineage": false}

Discovery registers each version after the connector's cursor (the last registered version) as an
asset, under the connector's row lock with the cursor in the same transaction: location
`<path>@v<version>`, weight = the bytes its commit added, extra {"version", "rows", "files",
"operation"}. A Delta version is visible only once its commit file exists, and versions are
numbered without gaps, so registering up to the table's latest version never passes a commit still
in flight (invariant 5).

A batch reads the data files its versions added (`add` actions with `dataChange`), minus those
whose rows a later data-changing commit removed (a delete, an update, an overwrite, an upstream
Tidemark replay), directly or after a compaction moved them (lineage.dead_files): a version
restated since contributes only what is still live, like a replaced `job_output` commit, so a
downstream replay reads each row once. Files moved by `OPTIMIZE` (no `dataChange`) that nothing
removed since are still read from the version that wrote them. A version whose log entry was
cleaned up, or whose files were vacuumed, is an explicit error naming the version, never a silent
skip; so is a removal that cannot be traced through a compaction (docs/sources/delta.md).

A version that removes (with `dataChange`) files holding rows of registered versions restates
those versions: an upstream Tidemark replay or backfill, a delete, an update, an overwrite, also
of files a compaction wrote. Discovery finds the versions (`restated_versions`, through
compactions) and records their items in the removing version's `extra.restates` and in the
connector's cursor (`restate`, and the last removing version in `restate_through`) in the
transaction that registers the new version; `restatements.delta_restate` then gives every job
that committed them a backfill from them through the removing version, in one batch (invariant
12; docs/guarantees.md, "Restatements go first").

The log is read as the Delta protocol writes it (`_delta_log/<version>.json`, one action a line);
delta-rs (`deltalake`) answers the table's latest version, schema and protocol.
"""

import json
import logging
import os

from django.db import transaction

from inventory.models import Asset, Batch, Connector
from inventory.services.assets import assets_register
from inventory.services.errors import InvalidInput
from inventory.sources.config import check_known_keys
from inventory.sources.delta import lineage
from inventory.sources.identity import check_local_directory
from workers.spark.delta_log import confine_actions, resolve
from workers.spark.errors import ReadError

log = logging.getLogger(__name__)

KEYS = ("path", "lineage")
VERSIONS_PER_LOOK = 1000
# reader features whose files cannot be read as plain Parquet
UNREADABLE_FEATURES = ("deletionVectors", "columnMapping")


def _table(path: str, *, field: str = "config.path"):
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        raise InvalidInput(field, f"{path} is not a Delta table (no readable _delta_log)")
    table = DeltaTable(path)
    features = set(table.protocol().reader_features or [])
    unreadable = sorted(features & set(UNREADABLE_FEATURES))
    if unreadable:
        raise InvalidInput(
            field,
            f"the Delta table {path} uses {', '.join(unreadable)}, which Tidemark cannot read",
        )
    return table


def validate(config: dict) -> dict:
    check_known_keys(config, KEYS, kind="delta")
    path = config.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidInput("config.path", "a delta connector needs the table's absolute directory")
    check_local_directory(path, field="config.path")
    if "lineage" in config and not isinstance(config["lineage"], bool):
        raise InvalidInput("config.lineage", "must be true or false")
    _table(path)
    return config


def commit_actions(path: str, version: int) -> list[dict]:
    """The actions of one version's commit; InvalidInput when the log no longer holds it."""
    entry = os.path.join(path, "_delta_log", f"{version:020d}.json")
    try:
        with open(entry, encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.strip()]
    except FileNotFoundError:
        raise InvalidInput(
            "config.path",
            f"version {version} of the Delta table {path} is no longer in its log (cleaned up "
            "after a checkpoint): it cannot be read or replayed",
        ) from None


def _added(actions: list[dict]) -> list[dict]:
    return lineage.data_added(actions)


def _removed(actions: list[dict]) -> set[str]:
    return lineage.data_removed(actions)


def _rows(add: dict) -> int:
    try:
        return int(json.loads(add.get("stats") or "{}").get("numRecords", 0))
    except (TypeError, ValueError):
        return 0


def discover(connector: Connector) -> int:
    """Register the versions after the cursor, up to VERSIONS_PER_LOOK of them per look; the
    registered versions whose files they removed are added to the cursor's `restate` list."""
    path = connector.config["path"]
    after = (connector.cursor or {}).get("version")
    latest = _table(path).version()
    first = 0 if after is None else after + 1
    last = min(latest, first + VERSIONS_PER_LOOK - 1)
    if last < first:
        return 0
    items, removed, added_here = [], {}, set()
    for version in range(first, last + 1):
        actions = commit_actions(path, version)
        added = _added(actions)
        for gone in _removed(actions) - added_here:  # added in this look: never read
            removed.setdefault(gone, version)
        for add in added:
            added_here.add(add["path"])
            removed.pop(add["path"], None)  # put back (a reverted commit): nothing restated
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        extra = {
            "version": version,
            "rows": sum(_rows(a) for a in added),
            "files": len(added),
            "operation": info.get("operation", ""),
        }
        items.append((f"{path}@v{version}", sum(int(a.get("size", 0)) for a in added), extra))
    if removed and first:
        restating, untraceable = restated_versions(path, removed, start=last, below=first)
        ids = (
            dict(
                Asset.objects.filter(
                    connector=connector,
                    extra__version__in=sorted(set().union(*restating.values())),
                ).values_list("extra__version", "id")
            )
            if restating
            else {}
        )
        for _, _, extra in items:
            version = extra["version"]
            if restating.get(version):
                # the items this version restates: a job's batch over it publishes only once
                # the job's outputs of them are rebuilt (tidemark_stale_outputs)
                extra["restates"] = sorted(ids[v] for v in restating[version] if v in ids)
            if version in untraceable:
                extra["untraceable"] = untraceable[version]
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        if (locked.cursor or {}).get("version") != after:
            connector.cursor = locked.cursor  # another look registered these meanwhile
            return 0
        registered = assets_register(connector=locked, items=items)
        cursor = {**(locked.cursor or {}), "version": last}
        restated = {i for _, _, extra in items for i in extra.get("restates", [])}
        if restated:
            cursor["restate"] = sorted(set(cursor.get("restate", [])) | restated)
            # the last version that restates them: the backfill carries it (restatements.py)
            last_restating = max(e["version"] for _, _, e in items if e.get("restates"))
            through = Asset.objects.get(connector=locked, extra__version=last_restating).pk
            cursor["restate_through"] = max(cursor.get("restate_through") or 0, through)
        locked.cursor = cursor
        locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return registered


def restated_versions(
    path: str, removed: dict[str, int], *, start: int, below: int
) -> tuple[dict[int, set[int]], dict[int, str]]:
    """For the files in `removed` (path -> the version that removed it with a data change), the
    registered versions (below `below`) whose rows they held, traced through compactions by
    reading the log backwards from `start` (lineage.origins): ({removing version:
    {restated versions}}, {removing version: why it cannot be traced}). A file added by a
    version already cleaned from the log cannot be traced: it is logged, not guessed
    (docs/sources/delta.md)."""

    def gone(version: int, wanted: int) -> None:
        log.warning(
            "Delta table %s: %d removed files were added before version %d, which the log "
            "no longer holds; their versions are not restated",
            path,
            wanted,
            version + 1,
        )

    found, untraceable = lineage.origins(
        removed, start=start, actions_of=lambda v: commit_actions(path, v), gone=gone
    )
    restating = {}
    for by, versions in found.items():
        kept = {v for v in versions if v < below}  # a version of this look: read as it is now
        if kept:
            restating[by] = kept
    return restating, untraceable


def read_spec(*, connector: Connector, batch: Batch) -> dict:
    """The files the batch's versions added and no later data-changing commit removed."""
    path = connector.config["path"]
    versions = [
        extra["version"]
        for extra in Asset.objects.filter(
            connector=connector, id__gte=batch.span.lower, id__lt=batch.span.upper
        )
        .order_by("id")
        .values_list("extra", flat=True)
    ]
    table = _table(path)
    files = []
    if versions:
        assets = Asset.objects.filter(
            connector=connector, id__gte=batch.span.lower, id__lt=batch.span.upper
        ).values_list("extra", flat=True)
        for extra in assets:
            if extra.get("untraceable"):
                raise InvalidInput(
                    "config.path",
                    f"version {extra['version']} of the Delta table {path} cannot be read "
                    f"exactly once: {extra['untraceable']}. Skip the batch once the table's "
                    "rows are rebuilt another way, or restore the table",
                )
        later: list[list[dict]] = []
        for version in range(versions[0], table.version() + 1):
            actions = commit_actions(path, version)
            # before any file it names is looked at: inside the table's directory
            confine_actions(path, actions, version=version)
            if version in versions:
                _refuse_deletion_vectors(path, actions, version=version)
                files += [(version, add) for add in _added(actions)]
            later.append(actions)
        # a file a later data-changing commit removed, directly or after a compaction moved its
        # rows: its rows were restated there
        try:
            dead = lineage.dead_files([a["path"] for _, a in files], later)
        except lineage.Untraceable as exc:
            raise InvalidInput(
                "config.path", f"the Delta table {path} cannot be read exactly once: {exc}"
            ) from None
        files = [(v, a) for v, a in files if a["path"] not in dead]
    schema = json.loads(table.schema().to_json())
    return {
        "items": [f"{path}@v{v}" for v in versions],
        "source": {
            "kind": "delta",
            "path": path,
            "versions": versions,
            "files": [
                {
                    "path": resolve(path, add["path"], version=version, action="add"),
                    "version": version,
                    "partition_values": add.get("partitionValues") or {},
                }
                for version, add in files
            ],
            "columns": [
                {"name": f["name"], "type": f["type"]}
                for f in schema["fields"]
                if isinstance(f["type"], str)
            ],
            "partition_columns": list(table.metadata().partition_columns),
        },
    }


def _refuse_deletion_vectors(path: str, actions: list[dict], *, version: int) -> None:
    """An added file with a deletion vector holds rows that are deleted: read as plain Parquet
    they would come back, so the batch fails naming the version."""
    if any(isinstance(add.get("deletionVector"), dict) for add in _added(actions)):
        raise ReadError(
            f"version {version} of the Delta table {path} cannot be read: its add action has a "
            "deletion vector, which Tidemark cannot read"
        )
