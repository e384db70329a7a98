"""Sinks: write a batch's output so that a retry, replay or backfill replaces it, never duplicates it.

`write_sink(df, sink, batch_id=..., attempt=..., publish=...)` dispatches on sink["kind"]. Every
kind stages first and publishes inside the fence (`publish`, workers/spark/fence.py), which tells it
which earlier batches' outputs the new one replaces; those leave in the same step.

- "files": the batch's output is the directory `<path>/batch_id=<id>/` (partition columns below
  it). It is written to `<path>/_staging/batch_id=<id>-a<attempt>-<token>/`, then, inside the
  fence: the batch's previous output and every replaced batch's directory are renamed aside, the
  staged one renamed into place, the old ones deleted. Spark skips paths starting with `_`, so
  `spark.read.parquet(<path>)` sees each row once (with a `batch_id` partition column) and never a
  half-written batch. An attempt cleans up only the staging of earlier attempts of its batch,
  never a later one's. The renames are not one atomic step: a reader listing the directory in
  the milliseconds between them may miss the replaced rows, never see them twice.
- "postgres": see workers/spark/pgsink.py.
"""

import re
import uuid

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from workers.spark.errors import SinkError, spark_error_summary
from workers.spark.fence import Publish, static_publish
from workers.spark.pgsink import check_postgres, write_postgres

FILE_FORMATS = ("parquet", "json", "csv", "orc")


def write_sink(
    df: DataFrame,
    sink: dict,
    *,
    batch_id: int,
    attempt: int = 0,
    publish: Publish | None = None,
    version: int | None = None,
) -> dict:
    """Write `df` as batch `batch_id`'s output; returns {"rows_out", "bytes", "location", ...}.

    `publish` is the fence (default: replace nothing, no control plane); `version` is the batch's
    source order, what a table sink compares when no version column is declared.
    """
    if not isinstance(sink, dict):
        raise SinkError("sink must be an object with a 'kind'")
    publish = publish or static_publish()
    kind = sink.get("kind")
    if kind == "files":
        return write_files(df, sink, batch_id=batch_id, attempt=attempt, publish=publish)
    if kind == "postgres":
        return write_postgres(
            df, sink, batch_id=batch_id, attempt=attempt, publish=publish, version=version
        )
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


def write_files(
    df: DataFrame, sink: dict, *, batch_id: int, attempt: int = 0, publish: Publish | None = None
) -> dict:
    path, fmt, partition_by, options = _file_settings(sink)
    unknown = [c for c in partition_by if c not in df.columns]
    if unknown:
        raise SinkError(f"sink 'partition_by' names columns {unknown} that the output lacks")
    publish = publish or static_publish()

    spark = df.sparkSession
    hadoop_path = spark._jvm.org.apache.hadoop.fs.Path
    fs = hadoop_path(path).getFileSystem(spark._jsc.hadoopConfiguration())
    token = uuid.uuid4().hex[:12]
    staging = f"{path}/_staging/batch_id={batch_id}-a{int(attempt)}-{token}"

    _drop_earlier_attempts(fs, hadoop_path, path, batch_id=batch_id, attempt=attempt)

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

    final = f"{path}/batch_id={batch_id}"
    try:
        with publish() as replaced:
            _swap_in(fs, hadoop_path, path, staging, final, replaced, token=token)
    except BaseException:
        fs.delete(hadoop_path(staging), True)
        raise
    return {
        "rows_out": rows_out,
        "bytes": _data_bytes(fs, hadoop_path(final)),
        "location": final,
    }


def _drop_earlier_attempts(fs, hadoop_path, path: str, *, batch_id: int, attempt: int) -> None:
    """Staging left by this batch's earlier attempts that died; a later attempt's is left alone."""
    for status in fs.globStatus(hadoop_path(f"{path}/_staging/*batch_id={batch_id}-*")) or []:
        match = _STAGED.match(status.getPath().getName())
        if match is None or match["batch"] != str(batch_id):
            continue
        earlier = match["attempt"] is None or int(match["attempt"]) < int(attempt)
        if earlier:
            fs.delete(status.getPath(), True)


_STAGED = re.compile(r"^(?:replaced-)?batch_id=(?P<batch>\d+)-(?:a(?P<attempt>\d+)-)?[0-9a-f]+$")


def _swap_in(fs, hadoop_path, path, staging, final, replaced, *, token) -> None:
    """Inside the fence: move the outputs being replaced aside, the staged one into place."""
    retired = []
    try:
        for old in [final, *(f"{path}/batch_id={int(i)}" for i in replaced)]:
            if fs.exists(hadoop_path(old)):
                aside = f"{path}/_staging/replaced-{old.rsplit('/', 1)[1]}-{token}"
                if not fs.rename(hadoop_path(old), hadoop_path(aside)):
                    raise SinkError(f"cannot move the replaced output {old} aside")
                retired.append((old, aside))
        if not fs.rename(hadoop_path(staging), hadoop_path(final)):
            raise SinkError(f"cannot move the staged output into {final}")
    except BaseException:
        for old, aside in reversed(retired):
            fs.rename(hadoop_path(aside), hadoop_path(old))
        raise
    for _, aside in retired:
        fs.delete(hadoop_path(aside), True)


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
