"""`hudi` connectors: an Apache Hudi table whose items are its completed instants, in timeline
order.

    {"path": "/data/trips_hudi"}

Discovery registers each completed commit, deltacommit and replacecommit after the connector's
cursor (the last registered instant) as an asset, under the connector's row lock with the cursor
in the same transaction: location `<path>@<instant>`, weight = the bytes the instant wrote, extra
{"instant", "action", "operation", "rows", "files"}. Instants complete out of order when several
writers share a table, so a look registers only the instants before the earliest one still
requested or inflight (invariant 5): a later look registers it, then the rest, in order. A
rolled-back instant never completes and is never registered.

A batch reads the rows its instants were the last to write: the table's latest file slices (base
file and log files merged by hudi-rs, copy-on-write and merge-on-read alike) in the partitions
its instants wrote, keeping the records whose `_hoodie_commit_time` is one of its instants. A
key changed several times in the batch's instants gives its latest state once. Clustering and
compaction keep each record's commit time, so they read nothing and restate nothing.

An instant that changes rows earlier instants wrote restates those instants (invariant 12),
like a Delta version's removes: an update or delete (its write statistics count updated or
deleted records in a file group), an insert overwrite, an overwrite of the table or a dropped
partition (the file groups it replaced). The instants that wrote into those file groups, followed
through every clustering that moved their records into new file groups, are found by
`restated_instants` and recorded, in the transaction that registers the changing instant, in its
`extra.restates` and in the connector's cursor (`restate`, and the last changing instant in
`restate_through`); `restatements.hudi_restate` then gives every job that committed them a
backfill from them through the changing instant, in one batch, and until it publishes no batch
over the changing instant does (tidemark_stale_outputs; docs/guarantees.md, "Restatements go
first"). A restated instant then reads only its rows still live, the later instant bringing the
rest, so the sink holds each key's latest state once, at every state a reader can see.

An instant no longer on the active timeline (archived, its files cleaned) is a batch error naming
it, the table's retention and the way out, never a silent partial read: with `"archived":
"snapshot"` in the config, such a batch reads the rows its instants last wrote from every
partition's latest file slices (a snapshot backfill; docs/sources/hudi.md).
"""

import json
import logging
import os

from django.db import transaction

from inventory.models import Asset, Batch, Connector
from inventory.services.assets import assets_register
from inventory.services.errors import InvalidInput
from inventory.sources.config import check_known_keys
from inventory.sources.identity import check_local_directory
from workers.spark.errors import ReadError
from workers.spark.hudi_files import metadata_confined

log = logging.getLogger(__name__)

KEYS = ("path", "archived")
# what a batch does with an instant no longer on the active timeline: fail naming it, or read
# the rows it last wrote from the table's snapshot (every partition's latest file slices)
ARCHIVED = ("fail", "snapshot")
INSTANTS_PER_LOOK = 1000
WRITE_ACTIONS = ("commit", "deltacommit", "replacecommit")
# operations that move records without changing them (each record keeps its commit time)
NO_DATA_CHANGE = ("cluster", "compact", "log_compact")
# operations that drop the rows of the file groups they replace
REPLACING = ("insert_overwrite", "insert_overwrite_table", "delete_partition")
# Hudi's defaults, shown when hoodie.properties does not name the table's own
RETENTION_DEFAULTS = {"hoodie.cleaner.commits.retained": "10", "hoodie.keep.min.commits": "20"}


def _table(path: str, *, field: str = "config.path"):
    from hudi import HudiTable

    try:
        metadata_confined(path)  # before anything follows a link: no probing outside
    except ReadError as exc:
        raise InvalidInput(field, str(exc)) from None
    if not os.path.isfile(os.path.join(path, ".hoodie", "hoodie.properties")):
        raise InvalidInput(field, f"{path} is not a Hudi table (no .hoodie/hoodie.properties)")
    try:
        return HudiTable(path)
    except Exception as exc:  # hudi-rs raises its own HudiCoreError for an unreadable table
        first = (str(exc).strip().splitlines() or [""])[0]  # one line, for the CLI too
        raise InvalidInput(field, f"{path} is not a readable Hudi table: {first}") from None


def validate(config: dict) -> dict:
    check_known_keys(config, KEYS, kind="hudi")
    path = config.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidInput("config.path", "a hudi connector needs the table's absolute directory")
    check_local_directory(path, field="config.path")
    if config.get("archived", "fail") not in ARCHIVED:
        raise InvalidInput("config.archived", f"must be one of {', '.join(ARCHIVED)}")
    _table(path)
    return config


# ---- the timeline ------------------------------------------------------------------------------


def completed_instants(table) -> list:
    """The completed commits, deltacommits and replacecommits, in timeline order."""
    timeline = table.get_timeline()
    instants = [
        *timeline.get_completed_commits(),
        *timeline.get_completed_deltacommits(),
        *timeline.get_completed_replacecommits(),
    ]
    return sorted(instants, key=lambda instant: instant.timestamp)


def pending_floor(path: str) -> str | None:
    """The earliest instant of a write action still requested or inflight, None when none is.

    Read from the timeline's folder (`.hoodie/timeline` from table version 8, `.hoodie` before):
    `<ts>.<action>.requested`, `<ts>.<action>.inflight` (`<ts>.inflight` for a copy-on-write
    commit) while pending; `<ts>.<action>` or `<ts>_<completed>.<action>` once complete."""
    folder = os.path.join(path, ".hoodie", "timeline")
    if not os.path.isdir(folder):
        folder = os.path.join(path, ".hoodie")
    completed, pending = set(), set()
    for name in os.listdir(folder):
        parts = name.split(".")
        stamp = parts[0].split("_")[0]
        if not stamp.isdigit():
            continue
        if parts[-1] in ("requested", "inflight"):
            action = parts[1] if len(parts) == 3 else "commit"
            if action in WRITE_ACTIONS:
                pending.add(stamp)
        elif len(parts) == 2:
            completed.add(stamp)
    waiting = sorted(pending - completed)
    return waiting[0] if waiting else None


def instant_metadata(table, instant) -> dict:
    return json.loads(table.get_timeline().get_instant_metadata_in_json(instant) or "{}")


def _operation(metadata: dict) -> str:
    return str(metadata.get("operationType") or "").lower()


def _write_stats(metadata: dict) -> list[tuple[str, dict]]:
    return [
        (partition, stat)
        for partition, stats in (metadata.get("partitionToWriteStats") or {}).items()
        for stat in stats or ()
    ]


def _replaced(metadata: dict) -> dict[str, list[str]]:
    return metadata.get("partitionToReplaceFileIds") or {}


def changed_file_groups(metadata: dict) -> set[str]:
    """The file groups whose earlier rows this instant changed: updated or deleted records, or
    every file group an overwrite replaced. Clustering and compaction change none."""
    operation = _operation(metadata)
    if operation in NO_DATA_CHANGE:
        return set()
    changed = {
        stat["fileId"]
        for _, stat in _write_stats(metadata)
        if int(stat.get("numUpdateWrites") or 0) or int(stat.get("numDeletes") or 0)
    }
    if operation in REPLACING:
        changed |= {group for groups in _replaced(metadata).values() for group in groups or ()}
    return changed


def _record_writers(writers: dict[str, set[str]], stamp: str, metadata: dict) -> None:
    """Add one instant to `writers` (file group -> the instants whose records it may hold): a
    clustering's new file groups hold the records of the groups it replaced in their partition."""
    operation = _operation(metadata)
    if operation == "cluster":
        replaced = _replaced(metadata)
        for partition, stat in _write_stats(metadata):
            moved = set().union(*(writers.get(g, set()) for g in replaced.get(partition) or ()))
            writers.setdefault(stat["fileId"], set()).update(moved)
    elif operation not in NO_DATA_CHANGE:
        for _, stat in _write_stats(metadata):
            writers.setdefault(stat["fileId"], set()).add(stamp)


def restated_instants(table, *, first: str, last: str) -> dict[str, set[str]]:
    """{instant from `first` to `last`: the instants before `first` (registered by earlier looks)
    whose rows it changed}, followed through every clustering; an instant that changed none is
    left out. An instant already archived from the active timeline cannot be traced."""
    writers: dict[str, set[str]] = {}
    restating: dict[str, set[str]] = {}
    for instant in completed_instants(table):
        stamp = instant.timestamp
        if stamp > last:
            break
        metadata = instant_metadata(table, instant)
        if stamp >= first:
            found = {
                w
                for group in changed_file_groups(metadata)
                for w in writers.get(group, ())
                if w < first
            }
            if found:
                restating[stamp] = found
        _record_writers(writers, stamp, metadata)
    return restating


def _item(path: str, instant, metadata: dict) -> tuple[str, int, dict]:
    stats = [stat for _, stat in _write_stats(metadata)]
    rows = sum(
        int(s.get("numInserts") or 0)
        + int(s.get("numUpdateWrites") or 0)
        + int(s.get("numDeletes") or 0)
        for s in stats
    )
    extra = {
        "instant": instant.timestamp,
        "action": instant.action,
        "operation": _operation(metadata),
        "rows": rows,
        "files": len(stats),
    }
    return (
        f"{path}@{instant.timestamp}",
        sum(int(s.get("totalWriteBytes") or 0) for s in stats),
        extra,
    )


def discover(connector: Connector) -> int:
    """Register the completed instants after the cursor and before the earliest pending one, up
    to INSTANTS_PER_LOOK per look; the registered instants whose rows they changed are added to
    the cursor's `restate` list."""
    path = connector.config["path"]
    after = (connector.cursor or {}).get("instant")
    table = _table(path)
    floor = pending_floor(path)
    new = [
        instant
        for instant in completed_instants(table)
        if (after is None or instant.timestamp > after)
        and (floor is None or instant.timestamp < floor)
    ][:INSTANTS_PER_LOOK]
    if not new:
        return 0
    metadata = [instant_metadata(table, instant) for instant in new]
    items = [_item(path, instant, meta) for instant, meta in zip(new, metadata, strict=True)]
    first, last = new[0].timestamp, new[-1].timestamp
    restating = {}
    if after and any(changed_file_groups(meta) for meta in metadata):
        restating = restated_instants(table, first=first, last=last)
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        if (locked.cursor or {}).get("instant") != after:
            connector.cursor = locked.cursor  # another look registered these meanwhile
            return 0
        ids = (
            dict(
                Asset.objects.filter(
                    connector=locked, extra__instant__in=sorted(set().union(*restating.values()))
                ).values_list("extra__instant", "id")
            )
            if restating
            else {}
        )
        for _, _, extra in items:
            found = sorted(ids[s] for s in restating.get(extra["instant"], ()) if s in ids)
            if found:
                # the items this instant restates: a job's batch over it publishes only once
                # the job's outputs of them are rebuilt (tidemark_stale_outputs)
                extra["restates"] = found
        registered = assets_register(connector=locked, items=items)
        cursor = {**(locked.cursor or {}), "instant": last}
        restated = {i for _, _, extra in items for i in extra.get("restates", [])}
        if restated:
            cursor["restate"] = sorted(set(cursor.get("restate", [])) | restated)
            # the last instant that restates them: the backfill carries it (restatements.py)
            last_restating = next(e["instant"] for _, _, e in reversed(items) if e.get("restates"))
            through = Asset.objects.get(connector=locked, extra__instant=last_restating).pk
            cursor["restate_through"] = max(cursor.get("restate_through") or 0, through)
        locked.cursor = cursor
        locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return registered


# ---- a batch's read ----------------------------------------------------------------------------


def retention_settings(path: str) -> str:
    """The table's cleaner and archival retention as its hoodie.properties names it (Hudi's
    defaults when it does not)."""
    settings = dict(RETENTION_DEFAULTS)
    try:
        with open(os.path.join(path, ".hoodie", "hoodie.properties"), encoding="utf-8") as lines:
            for line in lines:
                key, sep, value = line.strip().partition("=")
                if sep and key in settings:
                    settings[key] = value
    except OSError:
        pass
    return ", ".join(f"{key}={value}" for key, value in settings.items())


def inside(path: str, relative: str, *, instant: str) -> str:
    """`relative` (a file the timeline or a file slice names) as a file inside the table, or
    InvalidInput naming the instant. Nothing outside the table is looked at, so the message is
    the same whether such a file exists or not."""
    root = os.path.realpath(path)
    if os.path.isabs(relative) or ".." in relative.replace("\\", "/").split("/"):
        resolved = None
    else:
        resolved = os.path.realpath(os.path.join(root, relative))
    if resolved is None or not resolved.startswith(root + os.sep):
        raise InvalidInput(
            "config.path",
            f"instant {instant} of the Hudi table {path} names a file outside the table "
            "directory: refused",
        )
    return resolved


def read_spec(*, connector: Connector, batch: Batch) -> dict:
    """The latest file slices of the partitions the batch's instants wrote, and those instants."""
    path = connector.config["path"]
    instants = [
        extra["instant"]
        for extra in Asset.objects.filter(
            connector=connector, id__gte=batch.span.lower, id__lt=batch.span.upper
        )
        .order_by("id")
        .values_list("extra", flat=True)
    ]
    table = _table(path)
    active = {instant.timestamp: instant for instant in completed_instants(table)}
    archived = [stamp for stamp in instants if stamp not in active]
    if archived and connector.config.get("archived", "fail") != "snapshot":
        raise InvalidInput(
            "config.path",
            f"instant {archived[0]} of the Hudi table {path} is no longer on its active "
            f"timeline (archived, its files cleaned, under {retention_settings(path)}): its changes "
            "cannot be read incrementally. The way out is a snapshot backfill: set the "
            'connector\'s config.archived to "snapshot" and retry, and the batch reads the rows '
            "its instants last wrote from every partition's latest file slices",
        )
    # an archived instant's partitions are unknown: every partition is read (None)
    reads, partitions = list(archived), None if archived else set()
    for stamp in instants:
        if stamp in archived:
            continue
        metadata = instant_metadata(table, active[stamp])
        if _operation(metadata) in NO_DATA_CHANGE:
            continue
        reads.append(stamp)
        for partition, stat in _write_stats(metadata):
            if partitions is not None:
                partitions.add(partition)
            if stat.get("path"):
                inside(path, stat["path"], instant=stamp)
    slices = []
    if reads:
        for file_slice in table.get_file_slices():
            if partitions is not None and file_slice.partition_path not in partitions:
                continue
            instant = file_slice.creation_instant_time
            base = file_slice.base_file_relative_path()
            logs = list(file_slice.log_files_relative_paths())
            for name in filter(None, [base, *logs]):
                inside(path, name, instant=instant)
            slices.append({"instant": instant, "base": base, "logs": logs})
    return {
        "items": [f"{path}@{stamp}" for stamp in instants],
        "source": {
            "kind": "hudi",
            "path": path,
            "instants": instants,
            "reads": reads,
            "slices": slices,
            # the slices' log blocks of instants completed after planning are not merged
            "as_of": max(active) if active else None,
        },
    }
