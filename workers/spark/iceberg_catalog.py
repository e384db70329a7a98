"""An Iceberg table's catalog, from a connector's or a sink's config. No Django here.

    {"catalog_uri": "sqlite:////data/lake/catalog.db", "warehouse": "/data/lake",
     "table": "sales.orders"}
    {"catalog_dsn_env": "LAKE_CATALOG_DSN", "warehouse": "/data/lake", "table": "sales.orders"}

pyiceberg's SQL catalog keeps each table's current metadata file in a database: a SQLite file
(`catalog_uri`, `sqlite:///` and an absolute path, for the demo and the tests) or a PostgreSQL
database whose DSN is in the environment variable `catalog_dsn_env` names (never the DSN itself,
which may hold a password; never Tidemark's own database, which the control plane checks:
inventory/sources/iceberg/config.py). `warehouse` is where new tables are created; `table` is
`namespace.name`, each part an identifier; `catalog_name` (default `tidemark`) is the catalog's
name in that database, where the SQL catalog keeps several catalogs apart.

What is checked here needs nothing but the config; where the paths may lie (the deployment's
allowed roots) is the control plane's business. A bad config is a `CatalogConfigError` naming
the key, which the control plane shows as a 400 on `config.<key>` and the worker as a batch error.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING
from urllib.parse import quote_plus, urlsplit

if TYPE_CHECKING:  # pyiceberg is imported where a catalog is opened, not at import time
    from pyiceberg.catalog import Catalog

KEYS = ("catalog_uri", "catalog_dsn_env", "catalog_name", "warehouse", "table")
# the SQL catalog keeps the tables of several catalogs apart by name: another writer's (Spark's
# JDBC catalog, say) is named in `catalog_name`
CATALOG_NAME = "tidemark"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class CatalogConfigError(ValueError):
    """A catalog config that cannot be used; `key` is the config key at fault."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def table_identifier(config: dict) -> tuple[str, str]:
    """(namespace, name) of `config["table"]`, each an identifier."""
    table = config.get("table")
    parts = table.split(".") if isinstance(table, str) else []
    if len(parts) != 2 or not all(_IDENTIFIER.fullmatch(part) for part in parts):
        raise CatalogConfigError(
            "table", "must be namespace.name, each part letters, digits and underscores"
        )
    return parts[0], parts[1]


def sqlite_path(config: dict) -> str | None:
    """The absolute path of the SQLite catalog file `catalog_uri` names (None without one)."""
    uri = config.get("catalog_uri")
    if uri is None:
        return None
    if not isinstance(uri, str) or not uri.startswith("sqlite:///") or "\x00" in uri:
        raise CatalogConfigError("catalog_uri", "must be sqlite:/// followed by an absolute path")
    path = uri.removeprefix("sqlite:///")
    if "?" in path or not path.startswith("/"):
        raise CatalogConfigError(
            "catalog_uri", "must be sqlite:////<absolute path> (four slashes), with no options"
        )
    return path


def warehouse_path(config: dict) -> str | None:
    """The warehouse directory (an absolute path, or a file:// URI of one); None without one."""
    warehouse = config.get("warehouse")
    if warehouse is None:
        return None
    if isinstance(warehouse, str) and warehouse.startswith("file://"):
        parts = urlsplit(warehouse)
        warehouse = parts.path if parts.netloc in ("", "localhost") else None
    if not isinstance(warehouse, str) or not warehouse.startswith("/") or "\x00" in warehouse:
        raise CatalogConfigError("warehouse", "must be an absolute directory path")
    return warehouse


def catalog_name(config: dict) -> str:
    name = config.get("catalog_name", CATALOG_NAME)
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise CatalogConfigError("catalog_name", "must be letters, digits and underscores")
    return name


def dsn_env(config: dict) -> str | None:
    name = config.get("catalog_dsn_env")
    if name is None:
        return None
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise CatalogConfigError("catalog_dsn_env", "must name an environment variable")
    return name


def check(config: dict) -> None:
    """Every key of a catalog config checked, without opening anything."""
    unknown = sorted(set(config) - set(KEYS))
    if unknown:
        raise CatalogConfigError(
            unknown[0], f"unknown key; an iceberg config has {', '.join(KEYS)}"
        )
    if ("catalog_uri" in config) == ("catalog_dsn_env" in config):
        raise CatalogConfigError(
            "catalog_uri",
            "give exactly one of catalog_uri (SQLite) and catalog_dsn_env (PostgreSQL)",
        )
    sqlite_path(config)
    dsn_env(config)
    catalog_name(config)
    warehouse_path(config)
    table_identifier(config)


def sqlalchemy_url(dsn: str) -> str:
    """A libpq DSN (a postgresql:// URI or key=value pairs) as the SQLAlchemy URL of psycopg2."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg2://" + dsn.split("://", 1)[1]
    from psycopg2.extensions import parse_dsn

    try:
        params = parse_dsn(dsn)
    except Exception:  # never repeat the DSN: it may hold a password
        raise CatalogConfigError(
            "catalog_dsn_env", "the variable does not hold a valid PostgreSQL DSN"
        ) from None
    # every parameter travels as a query option: libpq reads host, port, user alike there
    query = "&".join(f"{quote_plus(k)}={quote_plus(str(v))}" for k, v in params.items())
    return f"postgresql+psycopg2:///?{query}"


def catalog_uri(config: dict) -> str:
    """The SQLAlchemy URL of the catalog database (read from the environment for PostgreSQL)."""
    path = sqlite_path(config)
    if path is not None:
        return f"sqlite:///{path}"
    name = dsn_env(config)
    dsn = os.environ.get(name or "")
    if not dsn:
        raise CatalogConfigError(
            "catalog_dsn_env", f"environment variable {name} (the catalog's DSN) is not set"
        )
    return sqlalchemy_url(dsn)


def catalog_from(config: dict) -> Catalog:
    """The SQL catalog `config` names (see the module's docstring)."""
    from pyiceberg.catalog.sql import SqlCatalog

    check(config)
    properties = {"uri": catalog_uri(config)}
    warehouse = warehouse_path(config)
    if warehouse is not None:
        properties["warehouse"] = f"file://{warehouse}"
    return SqlCatalog(catalog_name(config), **properties)
