"""What a connector may read, and what makes up its source identity.

Tidemark's own data is not a source (docs/design.md, invariant 10): a meta table or table source may not
be one of Tidemark's tables (users, tokens, sessions, beat schedules, the inventory), a relation in
a system schema, a view built on any of those, or a view calling a user-defined function (which
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
from urllib.parse import urlparse

from django.apps import apps
from django.db import connection

from inventory.services.confinement import path_confined
from inventory.services.errors import InvalidInput

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


# The relation named by $1 as PostgreSQL resolves it, whether it is Tidemark's own, lies in
# Tidemark's schema with a Tidemark prefix, or is a view reading (at any depth) one of those.
_RESOLVE = """
WITH RECURSIVE target AS (
    SELECT to_regclass(%(relation)s) AS oid
), own AS (
    SELECT to_regclass(quote_ident(name)) AS oid FROM unnest(%(own)s::text[]) AS name
), own_schemas AS (
    SELECT DISTINCT c.relnamespace AS nsp FROM pg_class c JOIN own ON c.oid = own.oid
), reads(oid) AS (
    SELECT oid FROM target WHERE oid IS NOT NULL
    UNION
    SELECT d.refobjid FROM reads
    JOIN pg_rewrite r ON r.ev_class = reads.oid
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                    AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> reads.oid
)
SELECT n.nspname, c.relname,
       EXISTS (SELECT 1 FROM reads JOIN own ON own.oid = reads.oid) AS reads_own,
       EXISTS (
           SELECT 1 FROM reads JOIN pg_class rc ON rc.oid = reads.oid
           WHERE rc.relnamespace IN (SELECT nsp FROM own_schemas)
             AND rc.relname LIKE ANY (%(prefixes)s::text[])
       ) AS reads_own_prefix,
       EXISTS (
           SELECT 1 FROM reads JOIN pg_class rc ON rc.oid = reads.oid
           JOIN pg_namespace rn ON rn.oid = rc.relnamespace
           WHERE rn.nspname LIKE 'pg\\_%%' OR rn.nspname = ANY (%(system)s::text[])
       ) AS reads_system,
       (
           SELECT min(pn.nspname || '.' || p.proname) FROM reads
           JOIN pg_rewrite r ON r.ev_class = reads.oid
           JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                           AND d.refclassid = 'pg_proc'::regclass
           JOIN pg_proc p ON p.oid = d.refobjid
           JOIN pg_namespace pn ON pn.oid = p.pronamespace
           WHERE pn.nspname <> 'pg_catalog'
       ) AS calls_function
FROM target JOIN pg_class c ON c.oid = target.oid JOIN pg_namespace n ON n.oid = c.relnamespace
"""


def source_table_check(relation: str, *, field: str) -> None:
    """Refuse a relation (as quoted for SQL, e.g. '"public"."events"') that is, or reads, one of
    Tidemark's own tables or a system catalog. A relation that does not exist passes here; the
    caller's existence check names it."""
    verdict = _verdict(connection.settings_dict["NAME"], relation)
    if verdict:
        raise InvalidInput(field, verdict)


# (database, relation) pairs found safe: the hot paths (acquire, planning) re-check every call,
# and only DDL could change a verdict; refusals and missing relations are never remembered
_SAFE: set[tuple[str, str]] = set()


def _verdict(database: str, relation: str) -> str:
    if (database, relation) in _SAFE:
        return ""
    verdict, exists = _resolve(relation)
    if exists and not verdict:
        _SAFE.add((database, relation))
    return verdict


def _resolve(relation: str) -> tuple[str, bool]:
    prefixes = [prefix.replace("_", "\\_") + "%" for prefix in tidemark_table_prefixes()]
    with connection.cursor() as cursor:
        cursor.execute(
            _RESOLVE,
            {
                "relation": relation,
                "own": tidemark_table_names(),
                "prefixes": prefixes,
                "system": list(_SYSTEM_SCHEMAS),
            },
        )
        row = cursor.fetchone()
    if row is None:
        return "", False  # no such relation (yet)
    schema, name, reads_own, reads_own_prefix, reads_system, calls_function = row
    if reads_own or reads_own_prefix:
        return (
            f"{schema}.{name} is one of Tidemark's own tables (or reads one); Tidemark's data "
            "(users, tokens, the inventory) is never a source"
        ), True
    if reads_system:
        return f"{schema}.{name} is (or reads) a system catalog; it cannot be a source", True
    if calls_function:
        # a function may read anything (Tidemark's tables included) out of the check's sight
        return (
            f"{schema}.{name} is a view calling the function {calls_function}; a source may be a "
            "table or a view over tables, not over user-defined functions"
        ), True
    return "", True


def check_local_directory(path, *, field: str = "config.path") -> None:
    """A files connector's local directory must exist, be a directory and be readable now, so a
    typo is a 400 when the connector is saved rather than a discovery failure out of sight.
    Object-store URLs (`s3://bucket/prefix`, any fsspec URL) are not local directories: their
    connectors are checked by `sources/object_store.validate` instead."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput(field, "must be a directory path")
    scheme = urlparse(path).scheme
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
