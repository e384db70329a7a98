"""Sinks: write a batch's output so that a retry or replay replaces it, never duplicates it.

`write_sink(df, sink, batch_id=...)` dispatches on sink["kind"]:

- "files": the batch's output is the directory `<path>/batch_id=<id>/` (partition columns below
  it). It is written to `<path>/_staging/batch_id=<id>-<token>/` first, then swapped in: the old
  directory is renamed away, the staged one renamed into place, the old one deleted. Spark skips
  paths starting with `_`, so `spark.read.parquet(<path>)` sees every batch once (with a
  `batch_id` partition column) and never a half-written one.
- "postgres": see workers/spark/pgsink.py.
"""

import uuid

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from workers.spark.errors import SinkError, spark_error_summary
from workers.spark.pgsink import check_postgres, write_postgres

FILE_FORMATS = ("parquet", "json", "csv", "orc")


def write_sink(df: DataFrame, sink: dict, *, batch_id: int) -> dict:
    """Write `df` as batch `batch_id`'s output; returns {"rows_out", "bytes", "location"}."""
    if not isinstance(sink, dict):
        raise SinkError("sink must be an object with a 'kind'")
    kind = sink.get("kind")
    if kind == "files":
        return write_files(df, sink, batch_id=batch_id)
    if kind == "postgres":
        return write_postgres(df, sink, batch_id=batch_id)
    raise SinkError(f"unknown sink kind {kind!r}; supported kinds: files, postgres")


def check_sink(sink: dict) -> None:
    """Validate a sink config without Spark or a database (e.g. when a job is saved)."""
    if not isinstance(sink, dict):
        raise SinkError("sink must be an object with a 'kind'")
    kind = sink.get("kind")
    if kind == "files":
        _file_settings(sink)
    elif kind == "postgres":
        check_postgres(sink)
    else:
        raise SinkError(f"unknown sink kind {kind!r}; supported kinds: files, postgres")


def _file_settings(sink: dict) -> tuple[str, str, list[str], dict]:
    path = sink.get("path")
    if not isinstance(path, str) or not path.strip():
        raise SinkError("sink 'path' must be a directory path or URI")
    fmt = sink.get("format", "parquet")
    if fmt not in FILE_FORMATS:
        raise SinkError(f"sink 'format' must be one of {', '.join(FILE_FORMATS)}, got {fmt!r}")
    partition_by = sink.get("partition_by") or []
    if not isinstance(partition_by, list) or not all(isinstance(c, str) for c in partition_by):
        raise SinkError("sink 'partition_by' must be a list of column names")
    options = sink.get("options") or {}
    if not isinstance(options, dict):
        raise SinkError("sink 'options' must be an object of Spark writer options")
    return path.rstrip("/"), fmt, partition_by, options


def write_files(df: DataFrame, sink: dict, *, batch_id: int) -> dict:
    path, fmt, partition_by, options = _file_settings(sink)
    unknown = [c for c in partition_by if c not in df.columns]
    if unknown:
        raise SinkError(f"sink 'partition_by' names columns {unknown} that the output lacks")

    spark = df.sparkSession
    hadoop_path = spark._jvm.org.apache.hadoop.fs.Path
    fs = hadoop_path(path).getFileSystem(spark._jsc.hadoopConfiguration())
    token = uuid.uuid4().hex[:12]
    final = f"{path}/batch_id={batch_id}"
    staging = f"{path}/_staging/batch_id={batch_id}-{token}"
    retired = f"{path}/_staging/replaced-batch_id={batch_id}-{token}"

    # leftovers of this batch's earlier attempts that died while staging or swapping
    for status in fs.globStatus(hadoop_path(f"{path}/_staging/*batch_id={batch_id}-*")) or []:
        fs.delete(status.getPath(), True)

    observation = Observation(f"tm_rows_{token}")
    writer = (
        df.observe(observation, F.count(F.lit(1)).alias("rows"))
        .write.mode("errorifexists")
        .format(fmt)
        .options(**{k: str(v) for k, v in options.items()})
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        writer.save(staging)
        rows_out = int(observation.get["rows"])
    except Exception as exc:
        fs.delete(hadoop_path(staging), True)
        raise SinkError(
            f"writing {fmt} files to {path} failed: {spark_error_summary(exc)}"
        ) from exc

    had_output = fs.exists(hadoop_path(final))
    if had_output and not fs.rename(hadoop_path(final), hadoop_path(retired)):
        fs.delete(hadoop_path(staging), True)
        raise SinkError(f"cannot move the previous output {final} aside")
    if not fs.rename(hadoop_path(staging), hadoop_path(final)):
        if had_output:
            fs.rename(hadoop_path(retired), hadoop_path(final))
        raise SinkError(f"cannot move the staged output into {final}")
    if had_output:
        fs.delete(hadoop_path(retired), True)
    return {"rows_out": rows_out, "bytes": _data_bytes(fs, hadoop_path(final)), "location": final}


def _data_bytes(fs, root) -> int:
    """Size of the data files under `root`, without checksums and markers."""
    total = 0
    files = fs.listFiles(root, True)
    while files.hasNext():
        status = files.next()
        name = status.getPath().getName()
        if not name.startswith((".", "_")):
            total += status.getLen()
    return total
