"""Reading a `delta` source's batch: the data files its versions added. No Django here.

spec["source"] = {
    "kind": "delta", "path": table directory, "versions": [int, ...],
    "files": [{"path": absolute file, "version": int, "partition_values": {column: text}}, ...],
    "columns": [{"name", "type"}] (the table's schema, Delta type names),
    "partition_columns": [...],
}

The control plane chose the files (inventory/sources/delta.py), each confined to the table's
directory (workers/spark/delta_log.py), and is checked again here; Spark's executors read
them as Parquet, one read per partition, the partition values added as typed columns. A file that
is gone was vacuumed: the batch fails naming its version, never skips it.
"""

import os
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from workers.spark.delta_log import confined
from workers.spark.errors import ReadError
from workers.spark.sources.files import literal_path

# Delta's primitive type names as Spark SQL types (decimal(p,s) is spelled alike)
_TYPES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def _spark_type(delta_type: str) -> str:
    return _TYPES.get(delta_type, delta_type)


def read(spark: SparkSession, spec: dict) -> DataFrame:
    source = spec["source"]
    columns = source.get("columns") or []
    partition_columns = source.get("partition_columns") or []
    data = [c for c in columns if c["name"] not in partition_columns]
    schema = T.StructType.fromDDL(
        ", ".join(f"`{c['name']}` {_spark_type(c['type'])}" for c in data)
    )
    files = source.get("files") or []
    for file in files:
        # confined first: whether a file outside the table exists is never told
        file["path"] = confined(
            source["path"], _absolute(file["path"]), version=file["version"], action="add"
        )
        if not os.path.exists(file["path"]):
            raise ReadError(
                f"version {file['version']} of the Delta table {source['path']} cannot be read: "
                f"its file {os.path.basename(file['path'])} was vacuumed (replay from a later "
                "version, or keep files longer with delta.deletedFileRetentionDuration)"
            )
    order = [F.col(f"`{c['name']}`") for c in columns]
    if not files:
        empty = spark.createDataFrame([], schema)
        return _with_partitions(empty, {}, columns, partition_columns).select(*order)
    groups: dict[tuple, list[str]] = {}
    for file in files:
        values = file.get("partition_values") or {}
        key = tuple((name, values.get(name)) for name in partition_columns)
        # a file name is never a pattern: Spark globs `*`, `?`, `[...]`, `{...}` in a path
        groups.setdefault(key, []).append(literal_path(file["path"]))
    frames = [
        _with_partitions(
            spark.read.schema(schema).parquet(*paths), dict(key), columns, partition_columns
        ).select(*order)
        for key, paths in groups.items()
    ]
    return reduce(lambda a, b: a.unionByName(b), frames)


def _absolute(path) -> str | None:
    return path if isinstance(path, str) and path.startswith("/") and "\x00" not in path else None


def _with_partitions(df: DataFrame, values: dict, columns, partition_columns) -> DataFrame:
    types = {c["name"]: _spark_type(c["type"]) for c in columns}
    for name in partition_columns:
        df = df.withColumn(name, F.lit(values.get(name)).cast(types.get(name, "string")))
    return df


def covered_watermark(spec: dict) -> None:
    """None: the data's watermark column decides what the batch covered."""
    return None
