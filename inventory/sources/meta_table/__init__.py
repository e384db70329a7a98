"""A meta table in another PostgreSQL database, read through a connection of its own.

    {"dsn_env": "CATALOG_DB_URL",
     "meta_table": {"table": "public.landed_files", "uid_column": "uid", "item_column": "path",
                    "weight_column": "bytes", "filters": [...], "visibility": "writers"}}

Tidemark's own connection never reads it: the DSN is in the environment variable `dsn_env` names
(a role the operator grants read access to that table alone). Discovery reads the rows after the
last registered uid, in uid order, up to the visibility horizon evaluated in that database (the
same rules as a local meta table: items.py), and registers each as an asset (location = the item,
weight, extra {"uid"}), so batches are planned over Tidemark's inventory as for any source and the
worker reads the items as files. The last registered uid is the connector's cursor.
"""

from django.db import transaction

from inventory.models import Connector
from inventory.services.assets import assets_register
from inventory.services.errors import InvalidInput
from inventory.sources.config import check_known_keys
from inventory.sources.items import check_meta_table_keys, meta_table_source
from inventory.sources.remote_database import refuse_own_tables, source_connection

ALLOWED_KEYS = {
    "dsn_env",
    "meta_table",
    "format",
    "read_options",
    "schema",
    "lineage",
    "watermark_column",
    "discover_seconds",
}
# a meta table in Tidemark's own database is planned in place: no discovery, no connection of its
# own; `path` is the folder its relative items are read from, `table` the check of a `table` kind
LOCAL_KEYS = (ALLOWED_KEYS - {"dsn_env", "discover_seconds"}) | {"path", "table", "snapshot"}
ROWS_PER_LOOK = 10_000


def validate(config: dict) -> dict:
    check_known_keys(config, ALLOWED_KEYS, kind="meta_table")
    check_meta_table_keys(config.get("meta_table"))
    source = meta_table_source(config.get("meta_table"))
    with source_connection(config, field="config.dsn_env") as conn:
        refuse_own_tables(conn, source.relation, field="config.meta_table.table")
        sql, params = _rows(source, after=None, limit=0)
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
        except Exception as exc:  # the source names the missing relation or column
            reason = str(exc).strip().splitlines()[0]
            raise InvalidInput("config.meta_table", reason) from None
    return config


def _rows(source, *, after, limit: int) -> tuple[str, list]:
    """(uid, weight, item, settled) rows after uid `after`, in uid order, at most `limit`."""
    where, params = list(source.where), list(source.params)
    if after is not None:
        where.append(f"{source.uid} > %s")
        params.append(after)
    sql = (
        f"SELECT {source.uid}, {source.weight}, {source.item}, {source.settled} "
        f"FROM {source.relation} WHERE {' AND '.join(where) or 'true'} "
        f"ORDER BY {source.uid} LIMIT %s"
    )
    return sql, [*params, limit]


def discover(connector: Connector) -> int:
    """Register the settled rows after the last registered uid (up to ROWS_PER_LOOK per look)."""
    config = connector.config
    source = meta_table_source(config["meta_table"])
    after = (connector.cursor or {}).get("uid")
    sql, params = _rows(source, after=after, limit=ROWS_PER_LOOK)
    with source_connection(config, field="config.dsn_env") as conn, conn.cursor() as cursor:
        try:
            cursor.execute(sql, params)
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0]
            raise InvalidInput("config.meta_table", reason) from None
        rows = cursor.fetchall()
    items = []
    for uid, weight, item, settled in rows:
        if not settled:
            break  # the visibility horizon: a smaller uid may still commit before this one
        if weight is None or int(weight) < 0:
            raise InvalidInput("weight", f"uid {uid}: weight must be a non-negative number")
        items.append((str(item), int(weight), {"uid": uid}))
    if not items:
        return 0
    with transaction.atomic():
        locked = Connector.objects.select_for_update().get(pk=connector.pk)
        if (locked.cursor or {}).get("uid") != after:
            connector.cursor = locked.cursor  # another look registered these meanwhile
            return 0
        registered = assets_register(connector=locked, items=items)
        locked.cursor = {"uid": items[-1][2]["uid"]}
        locked.save(update_fields=["cursor", "updated_at"])
    connector.cursor = locked.cursor
    return registered


def read_spec(*, connector: Connector, batch) -> dict:
    """The batch's items are files named by the meta table: read like a directory's files."""
    locations = list(
        connector.assets.filter(id__gte=batch.span.lower, id__lt=batch.span.upper)
        .order_by("id")
        .values_list("location", flat=True)
    )
    return {"items": locations}
