"""Discovery of an `iceberg` connector: the current branch's new snapshots, registered in commit
order, and the registered snapshots whose rows they replaced."""

import logging

from django.db import transaction

from inventory.models import Asset, Connector
from inventory.services.assets import assets_register
from inventory.services.errors import InvalidInput
from inventory.sources.delta import lineage
from inventory.sources.iceberg import snapshots as history
from inventory.sources.iceberg.config import open_table
from workers.spark.errors import ReadError

log = logging.getLogger(__name__)

SNAPSHOTS_PER_LOOK = 1000


def new_snapshots(chain: list, cursor: dict) -> int:
    """Where in `chain` the snapshots after the cursor's start."""
    after = cursor.get("snapshot")
    if after is None:
        return 0
    ids = [s.snapshot_id for s in chain]
    if after in ids:
        return ids.index(after) + 1
    # the cursor's snapshot expired since: the later ones come after it in sequence (a format
    # version 1 table numbers none: its commit times order them)
    sequence, stamp = cursor.get("sequence") or 0, cursor.get("timestamp_ms") or 0
    return next(
        (
            i
            for i, s in enumerate(chain)
            if (s.sequence_number or 0, s.timestamp_ms) > (sequence, stamp)
        ),
        len(chain),
    )


def item(name: str, snapshot) -> tuple[str, int, dict]:
    extra = {
        "snapshot": snapshot.snapshot_id,
        "sequence": snapshot.sequence_number or 0,
        "operation": history.operation(snapshot),
        "rows": history.summary_int(snapshot, "added-records"),
        "files": history.summary_int(snapshot, "added-data-files"),
    }
    return (
        f"{name}@{snapshot.snapshot_id}",
        history.summary_int(snapshot, "added-files-size"),
        extra,
    )


def discover(connector: Connector) -> int:
    """Register the snapshots after the cursor, up to SNAPSHOTS_PER_LOOK per look; the registered
    snapshots whose rows they replaced are recorded for restatement (`restates`, cursor). A
    snapshot whose metadata names a file outside the table stops the look, naming it."""
    try:
        return _discover(connector)
    except ReadError as exc:
        raise InvalidInput("config.table", str(exc)) from None


def _discover(connector: Connector) -> int:
    config = connector.config
    name = config["table"]
    cursor = connector.cursor or {}
    table = open_table(config)
    chain = history.chain(table)
    start = new_snapshots(chain, cursor)
    new = chain[start : start + SNAPSHOTS_PER_LOOK]
    if not new:
        return 0
    items = [item(name, snapshot) for snapshot in new]
    removed: dict[str, int] = {}
    added_here: set[str] = set()
    for index, snapshot in enumerate(new, start=start):
        found = history.changes(table, snapshot, name=name)
        if found.equality_deletes:
            items[index - start][2]["untraceable"] = (
                "it has equality delete files, which Tidemark cannot read or trace"
            )
        acts = history.actions(table, snapshot, name=name, with_deletes=True, found=found)
        for gone in lineage.data_removed(acts) - added_here:  # added in this look: never read
            removed.setdefault(gone, index)
        for add in lineage.data_added(acts):
            added_here.add(add["path"])
    if removed and start:
        restating = restated(table, chain, removed, start=start + len(new) - 1, below=start)
        snapshot_ids = {s for found in restating.values() for s in found}
        ids = dict(
            Asset.objects.filter(
                connector=connector, extra__snapshot__in=sorted(snapshot_ids)
            ).values_list("extra__snapshot", "id")
        )
        for _, _, extra in items:
            found = restating.get(extra["snapshot"])
            if found:
                extra["restates"] = sorted(ids[s] for s in found if s in ids)
    last = new[-1]
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        if (locked.cursor or {}).get("snapshot") != cursor.get("snapshot"):
            connector.cursor = locked.cursor  # another look registered these meanwhile
            return 0
        registered = assets_register(connector=locked, items=items)
        cursor = {
            **(locked.cursor or {}),
            "snapshot": last.snapshot_id,
            "sequence": last.sequence_number or 0,
            "timestamp_ms": last.timestamp_ms,
        }
        restates = {i for _, _, extra in items for i in extra.get("restates", [])}
        if restates:
            cursor["restate"] = sorted(set(cursor.get("restate", [])) | restates)
            # the last snapshot that restates them, in commit order (items are; snapshot ids
            # are random): the backfill carries it (restatements.py)
            last_restating = next(e["snapshot"] for _, _, e in reversed(items) if e.get("restates"))
            through = Asset.objects.get(connector=locked, extra__snapshot=last_restating).pk
            cursor["restate_through"] = max(cursor.get("restate_through") or 0, through)
        locked.cursor = cursor
        locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return registered


def restated(table, chain: list, removed: dict[str, int], *, start: int, below: int) -> dict:
    """{removing snapshot id: {snapshot ids registered before (index < below) whose rows it
    took away}}, traced through compactions (inventory/sources/delta/lineage.py, origins) from chain[start] back."""
    name = table.name()
    label = ".".join(name[-2:]) if isinstance(name, tuple) else str(name)

    def gone(index: int, wanted: int) -> None:
        log.warning(
            "Iceberg table %s: %d removed files were added before snapshot %s, which the "
            "table no longer holds; their snapshots are not restated",
            label,
            wanted,
            chain[index + 1].snapshot_id if index + 1 < len(chain) else "?",
        )

    def actions_of(index: int) -> list[dict]:
        if index < 0:
            raise LookupError(index)
        return history.actions(table, chain[index], name=label, with_deletes=True)

    found, untraceable = lineage.origins(removed, start=start, actions_of=actions_of, gone=gone)
    for by, why in untraceable.items():
        log.warning("Iceberg table %s: snapshot %s: %s", label, chain[by].snapshot_id, why)
    return {
        chain[by].snapshot_id: {chain[v].snapshot_id for v in versions if v < below}
        for by, versions in found.items()
        if any(v < below for v in versions)
    }
