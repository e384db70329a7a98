"""Snapshots of an `iceberg` connector's table whose rows a later snapshot replaced, restated."""

from django.db import transaction

from inventory.models import Backfill, Connector, RestatementCause


def restate(connector: Connector) -> list[Backfill]:
    """Snapshots whose rows a later overwrite or delete replaced, recorded by discovery in
    `cursor.restate`, are rebuilt by every job that committed them, before its incremental work
    (priority 1), in one batch through the last snapshot restating them. A restated snapshot
    reads only its rows still live, the later one bringing the rest, so each row reaches the
    sink once. What waits for a running batch stays for the next look."""
    # imported here: the services import the source registry, which imports this package
    from inventory.services.restatements import restate_items

    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        ids = sorted((locked.cursor or {}).get("restate", []))
        if not ids:
            return []
        snapshots = list(
            locked.assets.filter(pk__in=ids)
            .order_by("id")
            .values_list("extra__snapshot", flat=True)
        )
        shown = ", ".join(map(str, snapshots[:10])) + (" ..." if len(snapshots) > 10 else "")
        created, done = restate_items(
            locked,
            ids,
            reason=f"later snapshots of Iceberg table {locked.config.get('table')} replaced rows "
            f"of snapshots {shown}",
            cause=RestatementCause.ICEBERG_SNAPSHOTS,
            detail={"snapshots": snapshots[:100]},
            priority=1,
            through=(locked.cursor or {}).get("restate_through"),
        )
        if done:
            locked.cursor = {
                k: v for k, v in locked.cursor.items() if k not in ("restate", "restate_through")
            }
            locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return created
