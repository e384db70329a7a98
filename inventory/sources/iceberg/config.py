"""An `iceberg` connector's config, checked when it is saved, and its table opened.

The catalog config (workers/spark/iceberg_catalog.py) plus `expired`: what a batch does with a
snapshot the table no longer holds (`fail`, the default, or `snapshot`: read the rows it added
that the table still holds). The SQLite catalog file and the table's location lie under the
deployment's allowed roots; the PostgreSQL catalog is never Tidemark's own database.
"""

import os

from inventory.services import endpoints
from inventory.services.confinement import path_confined
from inventory.services.errors import InvalidInput
from inventory.services.own_database import sink_refuse_own_database
from inventory.services.secrets import credential_value
from inventory.sources.config import check_known_keys
from workers.spark import iceberg_catalog
from workers.spark.errors import ReadError, SinkError
from workers.spark.iceberg_files import table_root

KEYS = (*iceberg_catalog.KEYS, "expired")
EXPIRED = ("fail", "snapshot")


def _field(key: str) -> str:
    return f"config.{key}"


def catalog_config(config: dict) -> dict:
    """The keys of `config` that name the catalog and the table."""
    return {key: value for key, value in config.items() if key in iceberg_catalog.KEYS}


def checked_catalog(config: dict) -> iceberg_catalog.CatalogConfig:
    """The catalog part of `config` checked (a connector's warehouse is optional); InvalidInput
    naming `config.<key>`."""
    try:
        return iceberg_catalog.check_catalog(catalog_config(config), need_warehouse=False)
    except iceberg_catalog.CatalogError as exc:
        raise InvalidInput(_field(exc.field), str(exc)) from None


def validate(config: dict) -> dict:
    check_known_keys(config, KEYS, kind="iceberg")
    checked = checked_catalog(config)
    if config.get("expired", "fail") not in EXPIRED:
        raise InvalidInput("config.expired", f"must be one of {', '.join(EXPIRED)}")
    if checked.sqlite_path is not None:
        path_confined(checked.sqlite_path, "config.catalog_uri")
    if checked.warehouse is not None:
        path_confined(checked.warehouse, "config.warehouse")
    if "catalog_dsn_env" in config:
        dsn = credential_value(config["catalog_dsn_env"], field="config.catalog_dsn_env")
        if not dsn:
            raise InvalidInput("config.catalog_dsn_env", f"${config['catalog_dsn_env']} is not set")
        endpoints.dsn_check(dsn, field="config.catalog_dsn_env")
        try:
            sink_refuse_own_database({"dsn_env": config["catalog_dsn_env"]})
        except InvalidInput as exc:
            raise InvalidInput("config.catalog_dsn_env", exc.message) from None
    open_table(config)
    return config


def open_table(config: dict):
    """The table the config names, its location confined; InvalidInput naming the key at fault."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    checked = checked_catalog(config)
    # pyiceberg would create an empty catalog in its place: a typo never makes a new one
    if checked.sqlite_path is not None and not os.path.isfile(checked.sqlite_path):
        raise InvalidInput("config.catalog_uri", f"{checked.sqlite_path} is not a catalog file")
    try:
        catalog = iceberg_catalog.catalog_from(
            checked, metadata_check=lambda path: path_confined(path, "config.table")
        )
    except iceberg_catalog.CatalogError as exc:
        raise InvalidInput(_field(exc.field), str(exc)) from None
    except SinkError as exc:  # not a catalog database (a file that is not SQLite, say)
        key = "catalog_uri" if checked.sqlite_path is not None else "catalog_dsn_env"
        raise InvalidInput(_field(key), f"is not a usable Iceberg catalog: {exc}") from None
    try:
        table = catalog.load_table(checked.identifier)
    except InvalidInput:  # its metadata file outside the allowed roots
        raise
    except iceberg_catalog.CatalogError as exc:
        raise InvalidInput(_field(exc.field), str(exc)) from None
    except ReadError as exc:  # its metadata file outside the table's location
        raise InvalidInput("config.table", str(exc)) from None
    except (NoSuchTableError, NoSuchNamespaceError):
        raise InvalidInput("config.table", f"the catalog has no table {config['table']}") from None
    except OSError as exc:  # its metadata file is gone or unreadable
        raise InvalidInput(
            "config.table", f"the Iceberg table {config['table']} cannot be opened: {exc}"
        ) from None
    except Exception as exc:  # the catalog's database: its message may repeat the DSN
        raise InvalidInput(
            "config.table",
            f"the Iceberg table {config['table']} cannot be opened: {type(exc).__name__} from "
            "its catalog",
        ) from None
    try:
        root = table_root(table.metadata.location, table=config["table"])
    except ReadError as exc:
        raise InvalidInput("config.table", str(exc)) from None
    path_confined(root, "config.table")
    return table
