"""Asset registration for `files` connectors, with ids in visibility order (invariant 5).

Registration holds the connector's row lock until it commits, so two registrations of one
connector never interleave: a reader resuming after id N can never later see a smaller id appear.
"""

import json
import os
from pathlib import Path

from django.db import connection, transaction

from inventory.models import Connector, ConnectorKind
from inventory.services.errors import InvalidInput

DEFAULT_PATTERNS = ["*.parquet", "*.json", "*.jsonl", "*.csv"]


def scan_directory(*, path: str, patterns: list[str] | None = None) -> list[tuple[str, int, dict]]:
    """Files under `path` matching `patterns`, oldest first, as (location, size, extra)."""
    root = Path(path)
    if not root.exists():
        raise InvalidInput("config.path", f"{path} does not exist")
    if not root.is_dir():
        raise InvalidInput("config.path", f"{path} is not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise InvalidInput("config.path", f"{path} is not readable by the Tidemark process")
    found = {}
    for pattern in patterns or DEFAULT_PATTERNS:
        for file in root.glob(pattern if "/" in pattern or "**" in pattern else f"**/{pattern}"):
            if file.is_file() and not file.name.startswith((".", "_")):
                stat = file.stat()
                found[str(file)] = (stat.st_mtime_ns, stat.st_size)
    ordered = sorted(found.items(), key=lambda item: (item[1][0], item[0]))
    return [(location, size, {"mtime_ns": mtime}) for location, (mtime, size) in ordered]


@transaction.atomic
def assets_register(*, connector: Connector, items: list[tuple[str, int, dict]]) -> int:
    """Register new items (location, weight, extra) of a connector; known locations are left alone.

    Returns how many were new. Ids are handed out under the connector's row lock.
    """
    for location, weight, _extra in items:
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise InvalidInput("weight", f"{location}: weight must be an integer, got {weight!r}")
        if weight < 0:
            raise InvalidInput("weight", f"{location}: weight must not be negative, got {weight}")
    Connector.objects.select_for_update().filter(pk=connector.pk).first()
    if not items:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO inventory_asset (connector_id, location, weight, extra, discovered_at)
            SELECT %s, location, weight, extra::jsonb, now()
            FROM unnest(%s::text[], %s::bigint[], %s::text[]) WITH ORDINALITY
                 AS t(location, weight, extra, ord)
            ORDER BY ord
            ON CONFLICT (connector_id, location) DO NOTHING
            """,
            [
                connector.pk,
                [item[0] for item in items],
                [item[1] for item in items],
                [json.dumps(item[2]) for item in items],
            ],
        )
        return cursor.rowcount


def assets_discover(*, connector: Connector) -> int:
    """Scan a `files` connector's directory and register the files not seen before."""
    if connector.kind != ConnectorKind.FILES:
        raise InvalidInput("kind", f"connector {connector.name} is {connector.kind}, not files")
    config = connector.config or {}
    if "meta_table" in config:
        raise InvalidInput("config", f"connector {connector.name} reads an external meta table")
    path = config.get("path")
    if not path:
        raise InvalidInput("config.path", "a files connector needs a directory path")
    items = scan_directory(path=path, patterns=config.get("patterns"))
    return assets_register(connector=connector, items=items)
