"""What every source kind's config check shares: the unknown-key rule, the discovery interval,
telling an object store URL from a local path (those three kept in services, which check a
sink's keys and schedule discoveries: inventory/services/config_keys.py, urls.py), and what the
workers read of a files connector's config. Kept apart from `registry.py`, which imports every
kind."""

from inventory.services.config_keys import (  # noqa: F401 (the kinds read them here)
    DEFAULT_DISCOVER_SECONDS,
    MAX_DISCOVER_SECONDS,
    check_discover_seconds,
    check_known_keys,
    discover_seconds,
)
from inventory.services.errors import InvalidInput
from inventory.services.urls import is_object_store_path  # noqa: F401 (kinds read it here)


def check_read_config(config: dict) -> None:
    """What the workers read of a files connector's config (a directory, an object store prefix
    or a meta table of files), checked when it is saved: `format`, `schema` (a DDL string; Spark
    parses it when a batch runs), `read_options` (the format's allowlisted Spark reader
    options, workers/spark/options.py: text, numbers or booleans), `lineage` (true or false)
    and `watermark_column` (a column name)."""
    from workers.spark.options import OptionError, normalized_reader_options
    from workers.spark.sources.files import FORMATS  # the formats the workers' reader reads

    fmt = config.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise InvalidInput("config.format", f"must be one of {', '.join(FORMATS)}")
    schema = config.get("schema")
    if schema is not None and (not isinstance(schema, str) or not schema.strip()):
        raise InvalidInput("config.schema", "must be a DDL string such as 'id INT, name STRING'")
    try:
        normalized_reader_options(fmt, config.get("read_options"))
    except OptionError as exc:
        field = f"config.read_options.{exc.key}" if exc.key else "config.read_options"
        raise InvalidInput(field, exc.reason) from None
    if not isinstance(config.get("lineage", False), bool):
        raise InvalidInput("config.lineage", "must be true or false")
    column = config.get("watermark_column")
    if column is not None and (not isinstance(column, str) or not column.strip()):
        raise InvalidInput("config.watermark_column", "must be a column name")
