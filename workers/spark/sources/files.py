"""Read a batch's items (file locations) as one DataFrame, optionally with lineage columns.

JSON and CSV are read in FAILFAST mode unless the job's read options say otherwise: a malformed
record fails the batch with Spark's message instead of turning silently into nulls. Parquet files
whose columns differ (schema drift) are read with `mergeSchema`, so no file's extra column is
dropped silently (a job's own `mergeSchema` read option or `schema` decides otherwise). CSV files
without a declared `schema` are checked against their headers (`enforceSchema` false): a file whose
header names other columns, or the same in another order, fails the batch naming it.
"""

import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from workers.spark.errors import ReadError, spark_error_summary
from workers.spark.options import OptionError, normalized_reader_options

FORMATS = ("parquet", "json", "csv")
DEFAULT_OPTIONS: dict[str, dict[str, str]] = {
    "parquet": {},
    "json": {"mode": "FAILFAST"},
    "csv": {"mode": "FAILFAST", "header": "true"},
}
LINEAGE_COLUMNS = ("_tm_batch_id", "_tm_job", "_tm_processed_at", "_tm_source_file")


def read_items(
    spark: SparkSession,
    locations: list[str],
    fmt: str,
    options: dict | None = None,
    schema: str | None = None,
    lineage: dict | None = None,
) -> DataFrame:
    """The rows of all `locations` in format `fmt` (parquet, json = JSON lines, csv).

    `options` are Spark reader options (e.g. {"header": "false", "sep": ";"}; only the format's
    allowlisted names, workers/spark/options.py), `schema` a DDL
    string ("id INT, name STRING"). With `lineage` = {"batch_id", "job", "processed_at"} the rows
    get `_tm_batch_id`, `_tm_job`, `_tm_processed_at` and `_tm_source_file`.
    Spark reads lazily: the caller forces evaluation (run_batch counts the rows) so that a
    malformed file fails inside the batch.
    """
    if fmt not in FORMATS:
        raise ReadError(f"unknown input format {fmt!r}; supported formats: {', '.join(FORMATS)}")
    if (
        not isinstance(locations, list)
        or not locations
        or not all(isinstance(loc, str) and loc for loc in locations)
    ):
        raise ReadError("items must be a non-empty list of file locations")
    merged = _reader_options(fmt, options)
    if fmt == "csv" and schema is None and "enforceSchema" not in merged:
        # the columns come from the header: every file's header must name the same columns in
        # the same order, else Spark reads a file by position under another file's names
        merged["enforceSchema"] = "false"
    if fmt == "parquet" and schema is None and "mergeSchema" not in merged:
        if _parquet_columns_differ(locations):
            # schema drift (a file gained or lost a column): Spark takes one footer's schema
            # unless asked to merge, and would drop the other files' extra columns silently
            merged["mergeSchema"] = "true"
    colon = next((loc for loc in locations if ":" in _file_part(loc)), None)
    if colon is not None:
        raise ReadError(
            f"cannot read {colon}: Spark (Hadoop) paths cannot hold a ':' in a file or "
            "directory name; rename it (e.g. 10-00-00 for a time) and register it again"
        )
    reader = spark.read.format(fmt).options(**merged)
    if schema is not None:
        if not isinstance(schema, str) or not schema.strip():
            raise ReadError("schema must be a DDL string such as 'id INT, name STRING'")
        try:
            reader = reader.schema(schema)
        except Exception as exc:
            raise ReadError(
                f"schema {schema!r} is not valid DDL: {spark_error_summary(exc)}"
            ) from exc
    try:
        # an item is one file, never a pattern: Spark globs `*`, `?`, `[...]`, `{...}` and `\`
        # in a path (a file `star*.json` read `starX.json` too), so they are escaped
        df = reader.load([literal_path(loc) for loc in locations])
    except Exception as exc:
        raise ReadError(f"cannot read {fmt} input: {spark_error_summary(exc)}") from exc
    if not df.columns:
        # every file was empty (JSON lines or CSV without a record): Spark inferred no column,
        # and no sink can write that; say so here rather than as the sink's failure
        named = ", ".join(locations[:3]) + (
            f" and {len(locations) - 3} more" if len(locations) > 3 else ""
        )
        raise ReadError(
            f"the batch's {fmt} input has no columns: its {len(locations)} file(s) hold no "
            f"record ({named}); give the connector a `schema` (DDL) to read empty files as "
            "zero rows, or skip the batch"
        )
    if lineage is not None:
        df = add_lineage(df, lineage)
    return df


def add_lineage(df: DataFrame, lineage: dict, *, source_file: bool = True) -> DataFrame:
    """Lineage columns; `_tm_source_file` only for rows read from files (Spark's `_metadata`)."""
    missing = [k for k in ("batch_id", "job", "processed_at") if k not in lineage]
    if missing:
        raise ReadError(f"lineage needs {missing}")
    added = {name.lower() for name in LINEAGE_COLUMNS if source_file or name != "_tm_source_file"}
    clash = [c for c in df.columns if c.lower() in added]
    if clash:
        raise ReadError(
            f"the input already has column(s) {clash} that lineage adds (written by an upstream "
            "job with lineage?); turn lineage off on this connector, or drop or rename them "
            "where they are written"
        )
    columns = [
        F.lit(int(lineage["batch_id"])).cast("bigint").alias("_tm_batch_id"),
        F.lit(str(lineage["job"])).alias("_tm_job"),
        F.lit(str(lineage["processed_at"])).cast("timestamp").alias("_tm_processed_at"),
    ]
    if source_file:
        columns.append(F.col("_metadata.file_path").alias("_tm_source_file"))
    return df.select("*", *columns)


_GLOB_CHARACTERS = re.compile(r"([\\*?\[\]{}])")


def literal_path(location: str) -> str:
    """`location` as Spark's reader takes it for exactly that file or directory: Spark globs
    `*`, `?`, `[...]`, `{...}` and `\\` in every path it loads, so they are escaped."""
    return _GLOB_CHARACTERS.sub(r"\\\1", location)


def _file_part(location: str) -> str:
    """The path of a location without its scheme (`file:`, `s3a://bucket`)."""
    if "://" in location:
        return location.split("://", 1)[1].split("/", 1)[-1]
    return location[len("file:") :] if location.startswith("file:") else location


def local_path(location: str) -> str | None:
    """The file system path of a local location (`/a/b`, `file:/a/b`, `file:///a/b`), or None
    for any other (an object store's URL, a relative name)."""
    path = "/" + location[len("file:") :].lstrip("/") if location.startswith("file:") else location
    return path if path.startswith("/") else None


def _parquet_columns_differ(locations: list[str]) -> bool:
    """Whether the Parquet files' column names differ, read from the footers of local files
    (no Spark job). True when any is not local (Spark merges the footers itself then: a
    cluster's object store is not listed here); False when one cannot be read (Spark's own read
    then names the file)."""
    if len(locations) < 2:
        return False
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return True
    seen = None
    for location in locations:
        path = local_path(location)
        if path is None:
            return True
        try:
            names = tuple(sorted(pq.read_schema(path).names))
        except Exception:  # noqa: BLE001 - missing or not Parquet: Spark's read names the file
            return False
        if seen is not None and names != seen:
            return True
        seen = names
    return False


def _reader_options(fmt: str, options: dict | None) -> dict[str, str]:
    """The format's defaults under the job's options, as the one allowlist passes them on."""
    try:
        given = normalized_reader_options(fmt, options)
    except OptionError as exc:
        raise ReadError(f"read_options: {exc}") from None
    return {**DEFAULT_OPTIONS[fmt], **given}
