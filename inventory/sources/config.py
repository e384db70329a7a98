"""What every source kind's config check shares: the unknown-key rule and telling an object
store URL from a local path. Kept apart from `registry.py`, which imports every kind."""

from inventory.services.errors import InvalidInput
from inventory.services.urls import is_object_store_path  # noqa: F401 (kinds read it here)


def check_known_keys(config: dict, known, *, kind: str, field: str = "config") -> None:
    """A key that nothing reads (in a source's config, in a job's sink: `field`) is a typo to
    report, never a setting ignored: InvalidInput naming `<field>.<key>`."""
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise InvalidInput(
            f"{field}.{unknown[0]}", f"is not a {kind} setting; use {', '.join(sorted(known))}"
        )


DEFAULT_DISCOVER_SECONDS = 60
MAX_DISCOVER_SECONDS = 31_536_000  # a year; beat's interval column holds up to 2**31 - 1


def _discover_seconds_valid(value) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int)
        and 1 <= value <= MAX_DISCOVER_SECONDS
    )


def check_discover_seconds(config: dict) -> None:
    """`discover_seconds`, when given, is the whole number of seconds between discoveries: a value
    beat cannot schedule is InvalidInput naming it, not a failing schedule sync later."""
    if "discover_seconds" in config and not _discover_seconds_valid(config["discover_seconds"]):
        raise InvalidInput(
            "config.discover_seconds",
            f"must be a whole number of seconds from 1 to {MAX_DISCOVER_SECONDS}, "
            f"got {config['discover_seconds']!r}",
        )


def discover_seconds(config: dict) -> int:
    """The seconds between discoveries of a connector; the default for a value stored before
    check_discover_seconds existed, so one connector never stops the schedules of all."""
    value = (config or {}).get("discover_seconds")
    return value if _discover_seconds_valid(value) else DEFAULT_DISCOVER_SECONDS


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
