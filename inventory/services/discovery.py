"""Discovery of every connector kind: which connectors discover their own items, and one look.

Every connector's kind (`inventory/sources/registry.py`, `kind_of`) says whether it discovers and
how; a look that registered new items nudges the connector's jobs at once
instead of leaving them to their next timer.
"""

from django.db import transaction

from inventory.models import Connector, ConnectorState
from inventory.services import restatements
from inventory.services.errors import Conflict, InvalidInput
from inventory.sources.registry import kind_of


def discovers(connector: Connector) -> bool:
    """Whether Tidemark finds this connector's items itself (not a meta table, not announced)."""
    return kind_of(connector).discovers(connector)


def discover(connector: Connector) -> int:
    """One look at the source: register what became visible since the last one, then the
    restatement checks the look calls for (its kind's `after_discover`).

    A `files` connector in snapshot mode (`config.snapshot: true`) takes one look: the files
    there then are its item set, closed afterwards (orchestration completes it once its jobs
    committed them). A table in snapshot mode closes itself at the maximum of its first look."""
    kind = kind_of(connector)
    snapshot = kind.snapshot_by_look(connector)
    if snapshot and (connector.cursor or {}).get("snapshot_closed"):
        return 0
    registered = kind.discover(connector)
    registered += kind.after_discover(connector, restatements)
    if snapshot:
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
