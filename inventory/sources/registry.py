"""Which module serves a connector's source, and what each one answers (`SourceKind`).

Every kind plans on the same core: its items get ids in the order they become visible (assets
registered under the connector's row lock, or a job's commit sequence), and batches are
weight-bounded id ranges over them, so backfills, gap reports, corrections and the dashboard
work the same for all kinds. A source module answers:

- `validate(config) -> dict`: the config checked (InvalidInput naming `config.<key>`);
- `discover(connector) -> int`: register the items that became visible since the last look
  (left out when the kind has nothing to discover: a job's output is announced by its commits);
- `read_spec(connector, batch) -> dict`: what the worker reads for one batch: `items` (labels
  of what it covers, for humans and logs) and `source` (`{"kind": ...}` plus what the worker's
  reader for that kind needs; never a secret, only environment-variable names);
- optionally `item_source(connector) -> ItemSource` when its items are not assets;
- optionally `derived(config) -> dict`: the keys of a stored config that `validate` filled in
  itself (a table's column type), so a pipelines file that leaves them out is not a change.

The worker reads a spec's `source` with the reader of the same name in
`workers/spark/sources/registry.py` (a test checks both registries name the same kinds).
A local directory and a meta table in Tidemark's database are served by `files.py` and
`items.py` themselves (None).
"""

from typing import Any, Protocol, runtime_checkable

from inventory.models import Connector, ConnectorKind
from inventory.sources import (
    delta,
    hudi,
    iceberg,
    job_output,
    kafka,
    meta_table,
    object_store,
    table,
)
from inventory.sources.config import is_object_store_path
from inventory.sources.identity import source_table_check
from inventory.sources.items import ItemSource, assets_source, meta_table_source, unique_uids


@runtime_checkable
class SourceKind(Protocol):
    """What every source kind's module provides (the optional parts are listed above)."""

    def validate(self, config: dict) -> dict: ...

    def read_spec(self, connector: Connector, batch: Any) -> dict: ...


KINDS: dict[str, SourceKind] = {
    "meta_table": meta_table,
    "object_store": object_store,
    "table": table,
    "kafka": kafka,
    "job_output": job_output,
    "delta": delta,
    "hudi": hudi,
    "iceberg": iceberg,
}


def source_name(kind: str, config: dict | None) -> str | None:
    """The source module's key for a connector of `kind` with `config`, None for the built-in
    local directory and meta table."""
    config = config or {}
    if "meta_table" in config:
        # in Tidemark's database: planned over it directly (items.py); elsewhere: mirrored
        return "meta_table" if "dsn_env" in config else None
    if kind == ConnectorKind.FILES:
        return "object_store" if is_object_store_path(config.get("path")) else None
    if kind == ConnectorKind.TABLE and "dsn_env" not in config:
        return None  # a table in Tidemark's database, read as a meta table (items.py)
    return kind if kind in KINDS else None


def source_module(kind: str, config: dict | None) -> SourceKind | None:
    name = source_name(kind, config)
    return KINDS[name] if name else None


def connector_source(connector: Connector) -> SourceKind | None:
    return source_module(connector.kind, connector.config)


def config_derived(connector: Connector) -> dict:
    """The keys of the connector's config its source filled in when it was saved (see above)."""
    module = connector_source(connector)
    derived = getattr(module, "derived", None) if module else None
    return derived(connector.config or {}) if derived else {}


def source_for_connector(connector) -> ItemSource:
    module = connector_source(connector)
    if module is not None:
        # a source of its own kind: its items are its registered assets unless it says otherwise
        if hasattr(module, "item_source"):
            return module.item_source(connector)
        return assets_source(connector.pk)
    spec = (connector.config or {}).get("meta_table")
    if spec is not None:
        source = meta_table_source(spec)
        # checked on every read too: a connector saved before the check existed is refused
        source_table_check(source.relation, field="config.meta_table.table")
        return unique_uids(source)
    return assets_source(connector.pk)
