"""Discovery of every connector kind: which connectors discover their own items, and one look.

A local directory is scanned by `files.py`; object stores, tables and topics by their source
module (`inventory/sources/registry.py`). A look that registered new items nudges the connector's jobs at once
instead of leaving them to their next timer.
"""

from django.db import transaction

from inventory.models import Connector, ConnectorKind, ConnectorState
from inventory.services import restatements
from inventory.services.errors import Conflict, InvalidInput
from inventory.sources import files
from inventory.sources.registry import connector_source, source_name


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
            registered += restatements.early_rows_register(connector)
            restatements.late_rows_restate(connector)
        if connector.kind == ConnectorKind.DELTA:
            restatements.delta_restate(connector)
        elif connector.kind == ConnectorKind.HUDI:
            restatements.hudi_restate(connector)
        elif connector.kind == ConnectorKind.ICEBERG:
            restatements.iceberg_restate(connector)
        elif source_name(connector.kind, connector.config) == "object_store":
            restatements.changed_files_restate(connector)  # objects rewritten under their key
    else:
        registered = files.directory_discover(connector=connector)
        restatements.changed_files_restate(connector)
    if snapshot_files:
        snapshot_close(connector)
    return registered


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
