"""A meta table in Tidemark's own database (`files` or `table` connector with a `meta_table` and
no `dsn_env`): planned over in place, read as the `tidemark_reader` role (items.py), never
discovered; with a `files` connector its items are files the worker opens, like a directory's.

    {"meta_table": {"table": "public.events_meta", "uid_column": "uid", "item_column": "item",
                    "weight_column": "weight"}, "path": "/data/landing"}
"""

from inventory.models import ConnectorKind
from inventory.services.errors import Conflict, InvalidInput
from inventory.sources.base import ItemSource, SourceKind
from inventory.sources.config import check_known_keys, check_read_config
from inventory.sources.identity import source_table_check
from inventory.sources.items import (
    assets_source,
    check_meta_table,
    meta_table_source,
    quote_table,
    unique_uids,
)
from inventory.sources.locations import local_items
from inventory.sources.meta_table import LOCAL_KEYS


class OwnMetaTableKind(SourceKind):
    name = "own_meta_table"
    discovers_items = False
    has_reader = False
    cursor_restarts = False

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        if "table" in config:
            relation = quote_table(config["table"], field_name="config.table")
            source_table_check(relation, field="config.table")
        if "meta_table" in config:
            check_known_keys(config, LOCAL_KEYS, kind="meta_table (in Tidemark's database)")
            check_meta_table(config["meta_table"])
        elif connector_kind == ConnectorKind.TABLE:
            raise InvalidInput(
                "config.dsn_env",
                "a table connector reads a table of another PostgreSQL database: give dsn_env "
                "(the environment variable holding its DSN), table and column; or a meta_table "
                "{table, uid_column, item_column, weight_column} in Tidemark's database",
            )
        if connector_kind == ConnectorKind.FILES:
            check_read_config(config)
        return config

    def item_source(self, connector) -> ItemSource:
        spec = (connector.config or {}).get("meta_table")
        if spec is None:
            return assets_source(connector.pk)
        source = meta_table_source(spec)
        # checked on every read too: a connector saved before the check existed is refused
        source_table_check(source.relation, field="config.meta_table.table")
        return unique_uids(source)

    def items_are_assets(self, connector) -> bool:
        return "meta_table" not in (connector.config or {})  # else rows of a table in place

    def reads_files(self, connector) -> bool:
        return connector.kind == ConnectorKind.FILES

    def check_announce(self, connector) -> None:
        if connector.kind != ConnectorKind.FILES:
            super().check_announce(connector)
        raise Conflict(
            f"connector {connector.name} reads the external meta table "
            f"{connector.config['meta_table']!r}: add rows there instead"
        )

    def read_spec(self, connector, batch, *, source=None) -> dict:
        read = super().read_spec(connector, batch, source=source)
        if connector.kind == ConnectorKind.FILES:
            # files the worker opens: inside the connector's directory, under the allowed roots
            read["items"] = local_items(read["items"], base=(connector.config or {}).get("path"))
        return read

    def no_time_reason(self) -> str:
        return "it plans over a meta table in Tidemark's database, whose rows record no time"


KIND = OwnMetaTableKind()
