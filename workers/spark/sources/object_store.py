"""Read a batch's objects from an object store (no Django here).

spec["source"] = {"kind": "object_store", "objects": [{"location", "size", "etag"}, ...],
"format": "parquet" | "json" | "csv", "spark_native": bool, "endpoint_url", "region",
"key_env", "secret_env", "session_token_env", optional "partition_bytes"} (credentials by
environment-variable name only).

With `spark_native` the locations go to `spark.read` as `s3a://` paths: that needs the cluster's
Hadoop S3A connector (hadoop-aws) and its credentials configured in Spark. Without it, the driver
plans and executors read: the driver checks that each object is still there with its registered
size and takes the batch's schema from the objects' metadata (Parquet footers; the first block of
a JSON or CSV object), then groups the objects in id order into Spark partitions of at most
`partition_bytes` (default `PARTITION_BYTES`; an object larger than that is a partition of its
own), and each group is read with pyarrow by an executor (`object_store_source.py`). No row passes
through the driver, so `batch_weight` bounds a batch's work, not the driver's memory.
"""

from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from workers.spark import python_sources
from workers.spark.errors import ReadError
from workers.spark.options import OptionError, normalized_reader_options
from workers.spark.sources.files import FORMATS, read_items
from workers.spark.sources.object_store_source import (
    SOURCE_FILE,
    ObjectStoreSource,
    credentials,
    filesystem,
    read_object,
)

PARTITION_BYTES = 128 * 1024 * 1024
# Spark reader options that mean something here, and what pyarrow does without them
_ARROW_OPTIONS = {
    "parquet": set(),
    "json": {"mode"},
    "csv": {"mode", "header", "sep", "delimiter", "quote"},
}
_PLAN_KEYS = ("endpoint_url", "region", "key_env", "secret_env", "session_token_env")


def read(spark: SparkSession, spec: dict) -> DataFrame:
    source = spec["source"]
    objects = source.get("objects") or []
    fmt = source.get("format") or spec.get("format")
    if fmt not in FORMATS:
        raise ReadError(f"unknown input format {fmt!r}; supported formats: {', '.join(FORMATS)}")
    if not objects:
        raise ReadError("the batch names no objects to read")
    locations = [obj["location"] for obj in objects]
    if source.get("spark_native"):
        df = read_items(
            spark,
            [_s3a(location) for location in locations],
            fmt,
            options=spec.get("read_options"),
            schema=spec.get("schema"),
        )
        if spec.get("lineage"):
            df = df.select("*", F.col("_metadata.file_path").alias(SOURCE_FILE))
        return df
    try:
        options = normalized_reader_options(fmt, spec.get("read_options"))
    except OptionError as exc:
        raise ReadError(f"read_options: {exc}") from None
    _check_options(fmt, options)
    secrets = credentials(source)
    settings = {key: source[key] for key in _PLAN_KEYS if source.get(key)}
    sizes, schemas = [], []
    for obj in objects:
        fs, path = filesystem(settings, obj["location"], secrets)
        sizes.append(_check_present(fs, path, obj))
        schemas.append(_schema_of(fs, path, obj["location"], fmt, options))
    try:
        schema = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ReadError(f"the batch's {fmt} objects have incompatible schemas: {exc}") from exc
    if spec.get("lineage"):
        schema = schema.append(pa.field(SOURCE_FILE, pa.string()))
    try:
        spark_schema = from_arrow_schema(schema)
    except Exception as exc:
        raise ReadError(
            f"the batch's {fmt} objects have a column Spark cannot hold: {exc}"
        ) from exc
    budget = int(source.get("partition_bytes") or PARTITION_BYTES)
    plan = {
        "source": settings,
        "format": fmt,
        "options": options,
        "lineage": bool(spec.get("lineage")),
        "schema": spark_schema.jsonValue(),
        "groups": group_by_bytes(locations, sizes, budget),
    }
    df = python_sources.load(spark, ObjectStoreSource, secrets, plan)
    return _with_schema(spark, df, spec.get("schema"))


def group_by_bytes(locations: list[str], sizes: list[int], budget: int) -> list[list[str]]:
    """Consecutive objects whose sizes sum to at most `budget` (at least one object a group)."""
    if budget < 1:
        raise ReadError(f"partition_bytes must be a positive number of bytes, got {budget}")
    groups: list[list[str]] = []
    total = 0
    for location, size in zip(locations, sizes, strict=True):
        if groups and total + size <= budget:
            groups[-1].append(location)
            total += size
        else:
            groups.append([location])
            total = size
    return groups


def _s3a(location: str) -> str:
    parsed = urlparse(location)
    return (
        location.replace(f"{parsed.scheme}://", "s3a://", 1) if parsed.scheme == "s3" else location
    )


def _check_options(fmt: str, options: dict) -> None:
    unsupported = sorted(set(options) - _ARROW_OPTIONS[fmt])
    if unsupported:
        raise ReadError(
            f"read option(s) {unsupported} are not supported when the worker reads {fmt} objects "
            "itself (supported: "
            f"{sorted(_ARROW_OPTIONS[fmt]) or 'none'}); set spark_native on a cluster with S3A"
        )
    if str(options.get("mode", "FAILFAST")).upper() != "FAILFAST":
        raise ReadError("read option mode: only FAILFAST when the worker reads objects itself")


def _schema_of(fs, path: str, location: str, fmt: str, options: dict) -> pa.Schema:
    try:
        return read_object(fs, path, fmt, options, first_block=True)
    except StopIteration:
        return pa.schema([])  # an empty JSON object: no rows, no columns
    except ReadError:
        raise
    except Exception as exc:  # a footer that is not Parquet's, a first line that is not JSON
        raise ReadError(f"cannot read {fmt} object {location}: {exc}") from exc


def _check_present(fs, path: str, obj: dict) -> int:
    """The object's size, once it is known to be the one registered."""
    import pyarrow.fs as pafs

    location = obj["location"]
    try:
        info = fs.get_file_info(path)
    except Exception as exc:
        raise ReadError(f"cannot reach object {location}: {exc}") from exc
    if info.type == pafs.FileType.NotFound:
        raise ReadError(
            f"object {location} does not exist (deleted or moved after it was registered)"
        )
    size = obj.get("size")
    if isinstance(size, int) and info.size is not None and info.size != size:
        raise ReadError(
            f"object {location} changed after it was registered ({size} bytes then, "
            f"{info.size} now); write new content under a new key"
        )
    return info.size or 0


def _with_schema(spark: SparkSession, df: DataFrame, schema) -> DataFrame:
    """Columns cast to a DDL schema's types (and in its order); extra columns are kept."""
    if schema is None:
        return df
    if not isinstance(schema, str) or not schema.strip():
        raise ReadError("schema must be a DDL string such as 'id INT, name STRING'")
    try:
        fields = spark.createDataFrame([], schema).schema.fields
    except Exception as exc:
        raise ReadError(f"schema {schema!r} is not valid DDL: {exc}") from exc
    missing = [field.name for field in fields if field.name not in df.columns]
    if missing:
        raise ReadError(f"the objects have no column(s) {missing} named in the schema")
    named = {field.name for field in fields}
    return df.select(
        *[F.col(field.name).cast(field.dataType).alias(field.name) for field in fields],
        *[column for column in df.columns if column not in named],
    )


def covered_watermark(spec: dict) -> None:
    """None: the data's watermark column decides what the batch covered."""
    return None
