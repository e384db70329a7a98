"""Which module serves a connector's source, and the three things each one answers.

Every kind plans on the same core: its items get ids in the order they become visible (assets
registered under the connector's row lock, or a job's commit sequence), and batches are
weight-bounded id ranges over them, so backfills, gap reports, corrections and the dashboard
work the same for all kinds. A source module answers:

- `validate(config) -> dict`: the config checked (InvalidInput naming `config.<key>`);
- `discover(connector) -> int`: register the items that became visible since the last look
  (None in `DISCOVERS` when the kind has nothing to discover);
- `read_spec(connector, batch) -> dict`: what the worker reads for one batch: `items` (labels
  of what it covers, for humans and logs) and `source` (`{"kind": ...}` plus what the worker's
  reader for that kind needs; never a secret, only environment-variable names);
- optionally `item_source(connector) -> ItemSource` when its items are not assets;
- optionally `derived(config) -> dict`: the keys of a stored config that `validate` filled in
  itself (a table's column type), so a pipelines file that leaves them out is not a change.

A local directory and a meta table in Tidemark's database are served by `assets.py` and
`items.py` themselves (None).
"""

from importlib import import_module
from types import ModuleType
from urllib.parse import urlparse

from inventory.models import Connector, ConnectorKind
from inventory.services.errors import InvalidInput

_MODULES = {
    "meta_table": "inventory.services.source_meta_table",
    "object_store": "inventory.services.source_object_store",
    "table": "inventory.services.source_table",
    "kafka": "inventory.services.source_kafka",
    "job_output": "inventory.services.source_job_output",
    "delta": "inventory.services.source_delta",
}


def is_object_store_path(path) -> bool:
    """`s3://bucket/prefix` and any other fsspec URL (a one-letter scheme is a Windows drive)."""
    if not isinstance(path, str):
        return False
    scheme = urlparse(path).scheme
    return len(scheme) > 1 and scheme != "file"


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
    return kind if kind in _MODULES else None


def source_module(kind: str, config: dict | None) -> ModuleType | None:
    name = source_name(kind, config)
    return import_module(_MODULES[name]) if name else None


def connector_source(connector: Connector) -> ModuleType | None:
    return source_module(connector.kind, connector.config)


def config_derived(connector: Connector) -> dict:
    """The keys of the connector's config its source filled in when it was saved (see above)."""
    module = connector_source(connector)
    derived = getattr(module, "derived", None) if module else None
    return derived(connector.config or {}) if derived else {}


def check_known_keys(config: dict, known, *, kind: str) -> None:
    """A config key the source does not read is a typo to report, never a setting ignored:
    InvalidInput naming `config.<key>`."""
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise InvalidInput(
            f"config.{unknown[0]}", f"is not a {kind} setting; use {', '.join(sorted(known))}"
        )
