"""An Iceberg table's catalog, from a sink's or a connector's config (no Django here).

    {"catalog_uri": "sqlite:////data/iceberg/catalog.db",   # or "catalog_dsn_env": "ICEBERG_DSN"
     "catalog_name": "tidemark",                           # optional, the default
     "warehouse": "/data/iceberg/warehouse",
     "table": "sales.orders"}

pyiceberg's SQL catalog keeps each table's current metadata location in one row of a database: a
SQLite file under the allowed roots (the demo, the tests, one machine), or a PostgreSQL database
the deployment names through an environment variable holding its DSN, never Tidemark's own
(checked when the config is saved, and again here on the catalog's own connection when the
worker is given the control plane's identity, as the PostgreSQL sink does). A commit is the
catalog's compare-and-swap of that row, so two writers never both win. The SQL catalog keeps the
tables of several catalogs apart by name: `catalog_name` (default `tidemark`) reads a table
another writer registered under its own (Spark's JDBC catalog, say). A sink creates tables in its
`warehouse`, which it needs; a connector reads a table that exists, so its warehouse is optional.

`check_catalog` reads the config without touching anything (the control plane calls it when a
job or connector is saved); `catalog_from` opens the catalog. Where the paths may lie (under
TIDEMARK_ALLOWED_ROOTS) is the control plane's check (inventory/services/capabilities.py), made
when the config is saved and again before every batch.
"""

import os
import re
from dataclasses import dataclass

from workers.spark.errors import SinkError, scrub_dsn
from workers.spark.iceberg_files import confined, local_path

# the keys a catalog config may hold (a sink's or a connector's config adds its own)
KEYS = ("catalog_uri", "catalog_dsn_env", "catalog_name", "warehouse", "table")
# the catalog name when the config gives none: the SQL catalog keys its rows by it, so a table
# written by a sink and read by a source with the same catalog database is the same table
CATALOG_NAME = "tidemark"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_SQLITE = "sqlite:///"


class CatalogError(SinkError):
    """A catalog config that cannot be used; `field` names its key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"'{key}' {message}")
        self.field = key


@dataclass(frozen=True)
class CatalogConfig:
    sqlite_path: str | None  # the SQLite file, or None for PostgreSQL
    dsn_env: str | None  # the variable holding the PostgreSQL DSN
    warehouse: str | None  # an absolute local directory (None: a connector that gave none)
    namespace: str
    name: str
    catalog_name: str = CATALOG_NAME

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def check_catalog(config: dict, *, need_warehouse: bool = True) -> CatalogConfig:
    """The catalog part of `config`, checked; CatalogError naming the key otherwise.
    `need_warehouse`: a sink creates its table there; a connector only reads one."""
    uri, dsn_env = config.get("catalog_uri"), config.get("catalog_dsn_env")
    if (uri is None) == (dsn_env is None):
        raise CatalogError(
            "catalog_uri",
            "or 'catalog_dsn_env': exactly one must be given, a SQLite file "
            "(sqlite:////abs/catalog.db) or the variable holding a PostgreSQL DSN",
        )
    sqlite_path = None
    if uri is not None:
        sqlite_path = sqlite_file(uri)
    elif not isinstance(dsn_env, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", dsn_env):
        raise CatalogError("catalog_dsn_env", "must name an environment variable")
    warehouse = None
    if need_warehouse or config.get("warehouse") is not None:
        warehouse = local_directory(config.get("warehouse"), "warehouse")
    namespace, name = table_identifier(config.get("table"))
    name_given = config.get("catalog_name", CATALOG_NAME)
    if not isinstance(name_given, str) or not _IDENTIFIER.fullmatch(name_given):
        raise CatalogError(
            "catalog_name", "must be an identifier (letters, digits, _; at most 63 chars)"
        )
    return CatalogConfig(sqlite_path, dsn_env, warehouse, namespace, name, name_given)


def sqlite_file(uri) -> str:
    """The absolute path of a `sqlite:////abs/path.db` catalog URI."""
    if not isinstance(uri, str) or not uri.startswith(_SQLITE):
        raise CatalogError(
            "catalog_uri", "must be sqlite:/// followed by an absolute path (sqlite:////data/c.db)"
        )
    path = uri[len(_SQLITE) :]
    if not path.startswith("/") or "?" in path or "\x00" in path or path.endswith("/"):
        raise CatalogError(
            "catalog_uri",
            f"must name an absolute SQLite file path after sqlite:/// (sqlite:////data/c.db), "
            f"got {uri!r}",
        )
    return os.path.normpath(path)


def local_directory(value, key: str) -> str:
    """An absolute local directory (a `file:` URI accepted), normalised."""
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(key, "must be an absolute local directory")
    path = value
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    if "://" in path or not path.startswith("/"):
        raise CatalogError(
            key,
            f"must be an absolute local directory (or file: URI), got {value!r}; object stores "
            "are not supported yet",
        )
    if "\x00" in path:
        raise CatalogError(key, "must not contain NUL characters")
    return os.path.normpath(path)


def table_identifier(value) -> tuple[str, str]:
    if not isinstance(value, str) or value.count(".") != 1:
        raise CatalogError("table", f"must be 'namespace.name', got {value!r}")
    namespace, name = value.split(".")
    for part in (namespace, name):
        if not _IDENTIFIER.fullmatch(part):
            raise CatalogError(
                "table",
                f"part {part!r} is not a valid identifier (letters, digits, _; at most 63 chars)",
            )
    return namespace, name


def catalog_dsn(config: CatalogConfig) -> str:
    dsn = os.environ.get(config.dsn_env or "")
    if not dsn:
        raise CatalogError(
            "catalog_dsn_env", f"names the variable {config.dsn_env}, which is not set here"
        )
    return dsn


def sqlalchemy_url(dsn: str):
    """A libpq DSN (URI or key=value) as SQLAlchemy's URL for psycopg2."""
    import psycopg2
    from psycopg2.extensions import parse_dsn
    from sqlalchemy.engine import URL

    try:
        parts = dict(parse_dsn(dsn))
    except psycopg2.ProgrammingError:
        raise CatalogError("catalog_dsn_env", "holds a DSN libpq cannot parse") from None
    port = parts.pop("port", None)
    host = parts.pop("host", None)
    if host and host.startswith("/"):
        parts["host"] = host  # a Unix socket's directory goes to libpq as it is
        host = None
    return URL.create(
        "postgresql+psycopg2",
        username=parts.pop("user", None),
        password=parts.pop("password", None),
        host=host,
        port=int(port) if port else None,
        database=parts.pop("dbname", None),
        query=parts,
    )


def refuse_own_catalog_database(dsn: str, own_database: list[str] | None) -> None:
    """The catalog's PostgreSQL database is never Tidemark's own, whatever the DSN spells."""
    import psycopg2

    from workers.spark.pgsink.config import refuse_own_database

    if not own_database:
        return
    try:
        conn = psycopg2.connect(dsn, connect_timeout=10, application_name="tidemark-iceberg")
    except psycopg2.Error as exc:
        raise SinkError(
            f"cannot reach the Iceberg catalog database: {scrub_dsn(exc, dsn)}"
        ) from None
    try:
        refuse_own_database(conn, own_database, dsn)
    except SinkError as exc:
        raise SinkError(f"the Iceberg catalog: {exc}") from None
    finally:
        conn.close()


def _confined_catalog(metadata_check):
    """pyiceberg's SQL catalog, but a table's metadata file (the location the catalog's row
    holds, which anyone who can write the catalog may set) is checked before pyiceberg opens it:
    a local path (no other scheme: pyiceberg would reach an object store or a server with the
    worker's own credentials), accepted by `metadata_check` (the control plane's allowed roots),
    and once read, inside the table's own location (workers/spark/iceberg_files.py). The error
    is the same whether an outside file exists or not."""
    from pyiceberg.catalog.sql import SqlCatalog

    class ConfinedSqlCatalog(SqlCatalog):
        def _convert_orm_to_iceberg(self, orm_table):
            name = f"{orm_table.table_namespace}.{orm_table.table_name}"
            where = orm_table.metadata_location
            path = local_path(where)
            if where and path is None:
                raise CatalogError(
                    "table",
                    f"names the Iceberg table {name}, whose metadata file is not a local file "
                    "(only local tables are read): refused",
                )
            if where and metadata_check is not None:
                metadata_check(path)
            table = super()._convert_orm_to_iceberg(orm_table)
            confined(table.metadata.location, where, table=name, snapshot=None, what="metadata")
            return table

    return ConfinedSqlCatalog


def catalog_from(config: dict, *, own_database: list[str] | None = None, metadata_check=None):
    """The pyiceberg SQL catalog `config` names (its tables created on first use).

    `own_database` is the control plane's [server start, database]: a PostgreSQL catalog that
    lands there is refused before anything is created in it. A config dict is checked without
    needing a warehouse (a sink checked its own with `check_catalog` before). `metadata_check`
    (a local path -> None, or an error) is called on a table's metadata file before it is read
    (`_confined_catalog`)."""
    SqlCatalog = _confined_catalog(metadata_check)

    checked = config
    if not isinstance(config, CatalogConfig):
        checked = check_catalog(config, need_warehouse=False)
    properties = {}
    if checked.warehouse is not None:
        properties["warehouse"] = "file://" + checked.warehouse
    if checked.sqlite_path is not None:
        os.makedirs(os.path.dirname(checked.sqlite_path), exist_ok=True)
        uri = _SQLITE + checked.sqlite_path
    else:
        dsn = catalog_dsn(checked)
        refuse_own_catalog_database(dsn, own_database)
        uri = sqlalchemy_url(dsn).render_as_string(hide_password=False)
    try:
        return SqlCatalog(checked.catalog_name, uri=uri, **properties)
    except Exception as exc:  # noqa: BLE001 - a database the catalog cannot use
        where = checked.sqlite_path or f"${checked.dsn_env}"
        text = scrub_dsn(exc, uri)
        if checked.dsn_env:
            text = scrub_dsn(text, catalog_dsn(checked))
        # SQLAlchemy's first line says why; the rest repeats its SQL and a link: one line
        first = (text.strip().splitlines() or [""])[0]
        raise SinkError(f"cannot open the Iceberg catalog at {where}: {first[:300]}") from None
