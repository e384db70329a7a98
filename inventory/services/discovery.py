"""Discovery of every connector kind: which connectors discover their own items, and one look.

A local directory is scanned by `assets.py`; object stores, tables and topics by their source
module (`source_kinds.py`). A look that registered new items nudges the connector's jobs at once
instead of leaving them to their next timer.
"""

from django.db import transaction

from inventory.models import (
    Asset,
    Backfill,
    BatchStatus,
    Connector,
    ConnectorKind,
    ConnectorState,
)
from inventory.services import assets, backfills, source_table
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.source_kinds import connector_source


def discovers(connector: Connector) -> bool:
    """Whether Tidemark finds this connector's items itself (not a meta table, not announced)."""
    module = connector_source(connector)
    if module is not None:
        return hasattr(module, "discover")
    config = connector.config or {}
    return (
        connector.kind == ConnectorKind.FILES
        and "meta_table" not in config
        and bool(config.get("path"))
    )


def discover(connector: Connector) -> int:
    """One look at the source: register what became visible since the last one.

    A `files` connector in snapshot mode (`config.snapshot: true`) takes one look: the files
    there then are its item set, closed afterwards (orchestration completes it once its jobs
    committed them). A table in snapshot mode closes itself at the maximum of its first look."""
    module = connector_source(connector)
    snapshot_files = connector.kind == ConnectorKind.FILES and (connector.config or {}).get(
        "snapshot"
    )
    if snapshot_files and (connector.cursor or {}).get("snapshot_closed"):
        return 0
    if module is not None:
        if not hasattr(module, "discover"):
            raise InvalidInput("kind", f"connector {connector.name} has nothing to discover")
        registered = module.discover(connector)
        if connector.kind == ConnectorKind.TABLE:
            late_rows_restate(connector)
    else:
        registered = assets.assets_discover(connector=connector)
    if snapshot_files:
        snapshot_close(connector)
    return registered


def late_rows_restate(connector: Connector) -> list[Backfill]:
    """Late rows reach the sink even when nothing newer arrives (a table read with `lookback`).

    A job's lookback re-reads its window only when a newer slice makes a batch. So each look also
    recounts the slices within the largest lookback of the connector's jobs; a committed slice
    that gained rows is restated: every such job gets a backfill over those slices (reason
    "late rows ..."), which re-reads them and their lookback window into its upsert sink. The
    slices' counts are updated only once every job has its backfill, so a job whose batch was in
    flight over them is restated by a later look."""
    jobs = list(connector.jobs.filter(lookback__gt=0).select_related("watermark"))
    if not jobs:
        return []
    late = source_table.late_slices(connector, lookback=max(job.lookback for job in jobs))
    if not late:
        return []
    described = ", ".join(
        f"{asset.location} {asset.weight} -> {rows} rows" for asset, rows in late[:5]
    ) + (f" and {len(late) - 5} more" if len(late) > 5 else "")
    created, waiting = [], False
    span = (min(asset.pk for asset, _ in late), max(asset.pk for asset, _ in late) + 1)
    for job in jobs:
        if job.batches.filter(status=BatchStatus.RUNNING, span__overlap=span).exists():
            waiting = True  # it may have read before the late rows: the next look decides
            continue
        # slices this job has not committed yet are read, late rows included, when they run
        committed = [asset.pk for asset, _rows in late if asset.pk < job.watermark.position]
        if not committed:
            continue
        try:
            created.append(
                backfills.backfill_create(
                    job=job,
                    range_start=min(committed),
                    range_end=max(committed),
                    reason=f"late rows: {described}",
                    actor="tidemark",
                )
            )
        except Conflict:
            waiting = True  # a batch is in flight over them: the next look restates them
    if not waiting:
        with transaction.atomic():
            for asset, rows in late:
                Asset.objects.filter(pk=asset.pk).update(weight=rows)
    return created


@transaction.atomic
def snapshot_close(connector: Connector) -> None:
    locked = Connector.objects.select_for_update().get(pk=connector.pk)
    locked.cursor = {**(locked.cursor or {}), "snapshot_closed": True}
    locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor


def connector_discover_now(*, connector: Connector) -> int:
    """An operator's "look now" (API, dashboard): refused for paused and completed connectors."""
    if not discovers(connector):
        raise InvalidInput(
            "kind",
            f"connector {connector.name} does not discover its items (a meta table, or items "
            "announced by a producer)",
        )
    if connector.state == ConnectorState.PAUSED:
        raise Conflict(f"connector {connector.name} is paused; resume it first")
    if connector.state == ConnectorState.COMPLETED:
        raise Conflict(f"connector {connector.name} is completed: its item set is closed")
    return discover(connector)
