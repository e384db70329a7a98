"""Which `SourceKind` object serves a connector's source (inventory/sources/base.py says what
each one answers).

One object per behaviour, each in its own folder (`inventory/sources/<kind>/kind.py`), so
`kind_of(connector)` always answers: besides the kinds named after a connector kind, a `files`
connector over an object store URL is `object_store`, a meta table in another database is
`meta_table`, and a meta table in Tidemark's own database (a `files` or `table` connector with a
`meta_table` and no `dsn_env`) is `own_meta_table`. The worker reads a spec's `source` with the
reader of the same name in `workers/spark/sources/registry.py` (kinds with `has_reader`; a test
checks both registries agree).
"""

from inventory.models import Connector, ConnectorKind
from inventory.services.urls import is_object_store_path
from inventory.sources.base import ItemSource, SourceKind
from inventory.sources.delta.kind import KIND as delta
from inventory.sources.files.kind import KIND as files
from inventory.sources.hudi.kind import KIND as hudi
from inventory.sources.iceberg.kind import KIND as iceberg
from inventory.sources.job_output.kind import KIND as job_output
from inventory.sources.kafka.kind import KIND as kafka
from inventory.sources.meta_table.kind import KIND as meta_table
from inventory.sources.object_store.kind import KIND as object_store
from inventory.sources.own_meta_table import KIND as own_meta_table
from inventory.sources.table.kind import KIND as table

KINDS: dict[str, SourceKind] = {
    kind.name: kind
    for kind in (
        files,
        own_meta_table,
        meta_table,
        object_store,
        table,
        kafka,
        job_output,
        delta,
        hudi,
        iceberg,
    )
}


def source_name(kind: str, config: dict | None) -> str:
    """The name of the kind object serving a connector of `kind` with `config`."""
    config = config or {}
    if "meta_table" in config:
        # in Tidemark's database: planned over it in place; elsewhere: mirrored into assets
        return "meta_table" if "dsn_env" in config else "own_meta_table"
    if kind == ConnectorKind.FILES:
        return "object_store" if is_object_store_path(config.get("path")) else "files"
    if kind == ConnectorKind.TABLE and "dsn_env" not in config:
        return "own_meta_table"  # refused by its validate: a table needs dsn_env or meta_table
    return kind


def kind_for(kind: str, config: dict | None) -> SourceKind:
    """The kind object for a connector of `kind` with `config` (one not saved yet)."""
    return KINDS[source_name(kind, config)]


def kind_of(connector: Connector) -> SourceKind:
    return kind_for(connector.kind, connector.config)


def kind_named(name) -> SourceKind | None:
    """The kind a spec's `source.kind` names (None for a name no kind has)."""
    return KINDS.get(name) if isinstance(name, str) else None


def config_derived(connector: Connector) -> dict:
    """The keys of the connector's config its kind filled in when it was saved."""
    return kind_of(connector).derived(connector.config or {})


def source_for_connector(connector) -> ItemSource:
    return kind_of(connector).item_source(connector)


def job_delete_check(job) -> None:
    """Every kind may refuse deleting a job (Conflict): a job whose commits a connector reads."""
    for kind in KINDS.values():
        kind.check_job_delete(job=job)


def retention_kinds() -> list[str]:
    """The names of the kinds whose sources forget data (their `retention_probe` answers), in
    name order: the connector kinds whose jobs get a retention forecast."""
    return sorted(name for name, kind in KINDS.items() if kind.retention_probe() is not None)
