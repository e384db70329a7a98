"""What a connector may read, and what makes up its source identity.

Tidemark's own data is not a source (docs/design.md, invariant 10): a meta table or table source may not
be one of Tidemark's tables (users, tokens, sessions, beat schedules, the inventory), a relation in
a system schema, a view built on any of those, or a relation whose read reaches a user-defined
function (called by a view, or behind an operator, cast, aggregate, domain, policy or index: it
may read anything). Behind the check, local meta tables are read as the role tidemark_reader
(`items.fetch_items`), which holds no privilege on Tidemark's tables. `source_table_check` decides it in the database,
for the relation exactly as the planning and item queries name it: PostgreSQL resolves the quoted
name with the connection's own search_path (`to_regclass`), so schema qualification, quoting and
case cannot make a Tidemark table look like another one.

A connector's source identity (directory, meta table, table, topic, connection) decides what its
item ids mean; it does not change under existing jobs without a reset (connectors.connector_reset).
"""

import os
from pathlib import Path

from django.apps import apps

from inventory.services.confinement import path_confined
from inventory.services.errors import InvalidInput
from inventory.services.urls import url_scheme
from inventory.sql import gateway

# config keys whose change re-points a connector's jobs at other data
IDENTITY_KEYS = ("path", "meta_table", "table", "topic", "dsn_env", "job")

_SYSTEM_SCHEMAS = ("information_schema",)


def tidemark_table_names() -> list[str]:
    """Every table of Tidemark's Django apps (auth, tokens, sessions, admin log, content types,
    celery beat, the inventory, many-to-many tables included) plus the migration history."""
    names = {model._meta.db_table for model in apps.get_models(include_auto_created=True)}
    names.add("django_migrations")
    return sorted(names)


def tidemark_table_prefixes() -> list[str]:
    """Name prefixes of Tidemark's tables, so tables a later migration adds are covered too."""
    labels = {config.label for config in apps.get_app_configs() if list(config.get_models())}
    return sorted({f"{label}_" for label in labels} | {"django_"})


def source_table_check(relation: str, *, field: str) -> None:
    """Refuse a relation (as quoted for SQL, e.g. '"public"."events"') that is, or reads, one of
    Tidemark's own tables or a system catalog, or whose read can reach a user-defined function.
    A relation that does not exist passes here; the caller's existence check names it. Decided
    on every call (planning, acquire, a batch's items, lag): DDL can change the verdict at any
    time, so none is remembered."""
    verdict, _ = _resolve(relation)
    if verdict:
        raise InvalidInput(field, verdict)


def _resolve(relation: str) -> tuple[str, bool]:
    prefixes = [prefix.replace("_", "\\_") + "%" for prefix in tidemark_table_prefixes()]
    row = gateway.relation_resolve(
        relation=relation,
        own=tidemark_table_names(),
        prefixes=prefixes,
        system=list(_SYSTEM_SCHEMAS),
    )
    if row is None:
        return "", False  # no such relation (yet)
    schema, name, calls_function = row.schema, row.name, row.calls_function
    if row.reads_own or row.reads_own_prefix:
        return (
            f"{schema}.{name} is one of Tidemark's own tables (or reads one); Tidemark's data "
            "(users, tokens, the inventory) is never a source"
        ), True
    if row.reads_system:
        return f"{schema}.{name} is (or reads) a system catalog; it cannot be a source", True
    if calls_function:
        # a function may read anything (Tidemark's tables included) out of the check's sight
        return (
            f"{schema}.{name} reaches the function {calls_function} (called by a view, or behind "
            "an operator, cast, aggregate, domain check, row security policy or index it uses); "
            "a source may be a table or a view over tables, not over user-defined functions"
        ), True
    return "", True


def check_local_directory(path, *, field: str = "config.path") -> None:
    """A files connector's local directory must exist, be a directory and be readable now, so a
    typo is a 400 when the connector is saved rather than a discovery failure out of sight.
    Object-store URLs (`s3://bucket/prefix`, any fsspec URL) are not local directories: their
    connectors are checked by `sources/object_store.validate` instead."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput(field, "must be a directory path")
    scheme = url_scheme(path)
    if scheme == "file":
        raise InvalidInput(field, "file:// URLs are not accepted; give the absolute directory path")
    if scheme:
        raise InvalidInput(field, f"{scheme}:// is an object-store URL, not a local directory")
    path_confined(path, field)
    root = Path(path)
    if not root.exists():
        raise InvalidInput(field, f"{path} does not exist")
    if not root.is_dir():
        raise InvalidInput(field, f"{path} is not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise InvalidInput(field, f"{path} is not readable by the Tidemark process")


_META_TABLE_DEFAULTS = {"uid_column": "uid", "item_column": "item", "weight_column": "weight"}


def source_identity(config: dict | None) -> dict:
    """The parts of a config that decide which data a connector's item ids refer to (a meta
    table with its defaults filled in, so spelling a default out is no change)."""
    config = config or {}
    identity = {key: config[key] for key in IDENTITY_KEYS if key in config}
    spec = identity.get("meta_table")
    if isinstance(spec, dict):
        identity["meta_table"] = {"filters": [], **_META_TABLE_DEFAULTS, **spec}
    return identity


def identity_changes(old: dict | None, new: dict | None) -> list[str]:
    """Config fields (`config.<key>`) whose change re-points the connector at other data."""
    before, after = source_identity(old), source_identity(new)
    return [f"config.{key}" for key in IDENTITY_KEYS if before.get(key) != after.get(key)]
