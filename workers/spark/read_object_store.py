"""Read a batch's objects from an object store (no Django here).

spec["source"] = {"kind": "object_store", "objects": [{"location", "size", "etag"}, ...],
"format": "parquet" | "json" | "csv", "spark_native": bool, "endpoint_url", "region",
"key_env", "secret_env", "session_token_env"} (credentials by environment-variable name only).

With `spark_native` the locations go to `spark.read` as `s3a://` paths: that needs the cluster's
Hadoop S3A connector (hadoop-aws) and its credentials configured in Spark. Without it, this
process reads each object with pyarrow (`pyarrow.fs.S3FileSystem`, or any fsspec filesystem
through `FSSpecHandler`) into Arrow tables and hands Spark one DataFrame built from them: the
batch's data passes through the driver's memory, so `batch_weight` bounds it.
"""

import os
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from workers.spark.errors import ReadError
from workers.spark.readers import FORMATS, read_items

S3_SCHEMES = ("s3", "s3a")
SOURCE_FILE = "_tm_source_file"
# Spark reader options that mean something here, and what pyarrow does without them
_ARROW_OPTIONS = {
    "parquet": set(),
    "json": {"mode"},
    "csv": {"mode", "header", "sep", "delimiter", "quote"},
}


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
    table = _read_arrow(source, objects, fmt, spec.get("read_options") or {}, spec.get("lineage"))
    try:
        df = spark.createDataFrame(table)
    except Exception as exc:
        raise ReadError(f"cannot turn the {fmt} objects into a Spark DataFrame: {exc}") from exc
    return _with_schema(spark, df, spec.get("schema"))


def _s3a(location: str) -> str:
    parsed = urlparse(location)
    return (
        location.replace(f"{parsed.scheme}://", "s3a://", 1) if parsed.scheme == "s3" else location
    )


def _read_arrow(source: dict, objects: list[dict], fmt: str, options: dict, lineage):
    import pyarrow as pa

    tables = []
    for obj in objects:
        location = obj["location"]
        fs, path = _filesystem(source, location)
        _check_present(fs, path, obj)
        try:
            table = _read_one(fs, path, fmt, options)
        except ReadError:
            raise
        except Exception as exc:  # ArrowInvalid, a truncated file, an S3 error mid-read
            raise ReadError(f"cannot read {fmt} object {location}: {exc}") from exc
        if lineage:
            table = table.append_column(SOURCE_FILE, pa.array([location] * table.num_rows))
        tables.append(table)
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ReadError(f"the batch's {fmt} objects have incompatible schemas: {exc}") from exc


def _read_one(fs, path: str, fmt: str, options: dict):
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    unsupported = sorted(set(options) - _ARROW_OPTIONS[fmt])
    if unsupported:
        raise ReadError(
            f"read option(s) {unsupported} are not supported when the worker reads {fmt} objects "
            "itself (supported: "
            f"{sorted(_ARROW_OPTIONS[fmt]) or 'none'}); set spark_native on a cluster with S3A"
        )
    if str(options.get("mode", "FAILFAST")).upper() != "FAILFAST":
        raise ReadError("read option mode: only FAILFAST when the worker reads objects itself")
    if fmt == "parquet":
        return pq.read_table(path, filesystem=fs)
    with fs.open_input_stream(path) as stream:
        if fmt == "json":
            return pjson.read_json(stream)
        header = str(options.get("header", "true")).lower() == "true"
        delimiter = str(options.get("sep", options.get("delimiter", ",")))
        parse = pcsv.ParseOptions(delimiter=delimiter, quote_char=str(options.get("quote", '"')))
        read = pcsv.ReadOptions(autogenerate_column_names=not header)
        return pcsv.read_csv(stream, read_options=read, parse_options=parse)


def _check_present(fs, path: str, obj: dict) -> None:
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


def _filesystem(source: dict, location: str):
    """(pyarrow filesystem, path in it) for one object."""
    parsed = urlparse(location)
    if parsed.scheme in S3_SCHEMES:
        return _s3(source), f"{parsed.netloc}{parsed.path}"
    import fsspec
    import pyarrow.fs as pafs

    try:
        fs, path = fsspec.core.url_to_fs(location)
    except Exception as exc:
        raise ReadError(f"no filesystem for {location}: {exc}") from exc
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


_S3_CACHE: dict[tuple, object] = {}


def _s3(source: dict):
    import pyarrow.fs as pafs

    credentials = {}
    for key, option in (
        ("key_env", "access_key"),
        ("secret_env", "secret_key"),
        ("session_token_env", "session_token"),
    ):
        name = source.get(key)
        if name:
            value = os.environ.get(name)
            if not value:
                raise ReadError(
                    f"environment variable {name} (the source's {key}) is not set on this worker"
                )
            credentials[option] = value
    options = {"connect_timeout": 10, "request_timeout": 60}
    if source.get("endpoint_url"):
        options["endpoint_override"] = source["endpoint_url"]
    if source.get("region"):
        options["region"] = source["region"]
    key = tuple(sorted({**options, **credentials}.items()))
    if key not in _S3_CACHE:
        _S3_CACHE[key] = pafs.S3FileSystem(**options, **credentials)
    return _S3_CACHE[key]


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
