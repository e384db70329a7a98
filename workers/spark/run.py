"""run_batch: read a batch's items, run its processor, write its sink. Both executors call this.

spec = {
    "job": str, "batch_id": int, "kind": "incremental" | "backfill", "lower": int, "upper": int,
    "items": [location, ...], "format": "parquet" | "json" | "csv",
    "read_options": {...}, "schema": DDL string or None, "lineage": bool,
    "processed_at": ISO string (optional; the lineage timestamp, default now),
    "watermark_column": column (optional; also accepted in params),
    "processor": name, "params": {...}, "sink": {...},
    "attempt": int (the fencing token), "watermark_type": "int" | "datetime" | ... (optional),
    "fence": {"dsn_env": VAR} (the control plane's publish fence) or "replaces": [batch ids],
}
result = {"rows_in", "rows_out", "bytes", "location", "seconds", "watermark" (if asked), ...}

Any failure raises BatchError(type, message, detail, stage).
"""

import time
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from workers.spark.errors import (
    BatchError,
    ReadError,
    SinkError,
    spark_error_detail,
    spark_error_summary,
    spark_error_type,
)
from workers.spark.fence import publish_from_spec
from workers.spark.processors import (
    ProcessorContext,
    ProcessorError,
    UnknownProcessor,
    get_processor,
    load_processor_modules,
)
from workers.spark.readers import FORMATS, read_items
from workers.spark.sinks import check_sink, write_sink

_OWN_ERRORS = (ReadError, SinkError, ProcessorError)


def run_batch(spark: SparkSession, spec: dict) -> dict:
    started = time.monotonic()
    _check_spec(spec)
    params = spec.get("params") or {}
    try:
        processor = _processor(spec["processor"])
        check_sink(spec["sink"])
    except (ProcessorError, SinkError) as exc:
        raise _batch_error("config", exc) from exc
    watermark_column = spec.get("watermark_column") or params.get("watermark_column")

    try:
        lineage = None
        if spec.get("lineage"):
            lineage = {
                "batch_id": spec["batch_id"],
                "job": spec["job"],
                "processed_at": spec.get("processed_at") or datetime.now(UTC).isoformat(),
            }
        df = read_items(
            spark,
            spec["items"],
            spec["format"],
            options=spec.get("read_options"),
            schema=spec.get("schema"),
            lineage=lineage,
        )
        try:
            # evaluate the input now, so a malformed file fails here, named as a read error
            rows_in, watermark = _profile(df, watermark_column)
        except ReadError:
            raise
        except Exception as exc:
            raise ReadError(
                f"cannot read {spec['format']} input: {spark_error_summary(exc)}"
            ) from exc
    except Exception as exc:
        raise _batch_error("read", exc) from exc
    if watermark_column:
        # before anything is written: a value the job cannot store fails the batch here, clearly
        _check_watermark_type(spec.get("watermark_type"), watermark_column, watermark)

    ctx = ProcessorContext(
        job=spec["job"],
        batch_id=spec["batch_id"],
        lower=spec["lower"],
        upper=spec["upper"],
        params=params,
        kind=spec.get("kind", "incremental"),
    )
    try:
        out = processor(df, ctx)
        if not isinstance(out, DataFrame):
            raise ProcessorError(
                f"processor {spec['processor']!r} returned {type(out).__name__}, not a DataFrame"
            )
    except Exception as exc:
        raise _batch_error("process", exc, processor=spec["processor"]) from exc

    try:
        written = write_sink(
            out,
            spec["sink"],
            batch_id=spec["batch_id"],
            attempt=int(spec.get("attempt") or 0),
            publish=publish_from_spec(spec),
            # the batch's source order: its last item id (a later range wins in a table sink)
            version=spec["upper"] - 1,
        )
    except Exception as exc:
        raise _batch_error("write", exc) from exc

    result = {
        "rows_in": rows_in,
        **written,
        "seconds": round(time.monotonic() - started, 3),
    }
    if watermark_column:
        result["watermark"] = watermark
    return result


def _check_watermark_type(watermark_type: str | None, column: str, value) -> None:
    """The job's watermark type must be able to hold what `column` reports."""
    if watermark_type in (None, "int") or value is None:
        return
    if watermark_type == "datetime" and isinstance(value, str):
        return
    kind = "an integer" if isinstance(value, int) else "a single value"
    if watermark_type == "datetime":
        reason = "a datetime watermark needs a timestamp or date column"
    else:
        reason = f"a {watermark_type} watermark is not read from a column"
    raise BatchError(
        "WatermarkTypeMismatch",
        f"watermark_column {column!r} reports {kind} ({value!r}); {reason}: "
        "fix the connector's watermark_column or the job's watermark_type",
        "",
        "config",
    )


def _processor(name: str):
    try:
        return get_processor(name)
    except UnknownProcessor:
        # a processor of the project's own modules, named in TIDEMARK_PROCESSOR_MODULES
        load_processor_modules()
        return get_processor(name)


def _profile(df: DataFrame, watermark_column: str | None) -> tuple[int, object]:
    """Count the input rows and take the watermark column's maximum in one pass."""
    aggregates = [F.count(F.lit(1)).alias("rows")]
    if watermark_column:
        if watermark_column not in df.columns:
            raise ReadError(
                f"watermark_column {watermark_column!r} is not an input column; "
                f"the input has {df.columns}"
            )
        aggregates.append(_max_as_json(df, watermark_column).alias("watermark"))
    row = df.agg(*aggregates).first()
    watermark = row["watermark"] if watermark_column else None
    if isinstance(watermark, str) and watermark_column:
        watermark = _iso_with_zone(watermark)
    return int(row["rows"]), watermark


def _max_as_json(df: DataFrame, column: str):
    data_type = df.schema[column].dataType
    col = F.max(df[column])
    if isinstance(data_type, T.TimestampType):
        # formatted by Spark in the session time zone, with its offset: source time, exactly
        return F.date_format(col, "yyyy-MM-dd'T'HH:mm:ss.SSSSSSxxx")
    if isinstance(data_type, T.TimestampNTZType):
        # no zone in the data: read as UTC
        return F.concat(F.date_format(col, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"), F.lit("+00:00"))
    if isinstance(data_type, T.DateType):
        return F.concat(F.date_format(col, "yyyy-MM-dd"), F.lit("T00:00:00+00:00"))
    if isinstance(data_type, T.IntegralType):
        return col.cast("long")
    raise ReadError(
        f"watermark_column {column!r} has type {data_type.simpleString()}; "
        "it must be a timestamp, date or integer column"
    )


def _iso_with_zone(value: str) -> str:
    return datetime.fromisoformat(value).isoformat()


def _check_spec(spec) -> None:
    def invalid(field: str, reason: str):
        return BatchError("InvalidSpec", f"spec field {field!r} {reason}", "", "config")

    if not isinstance(spec, dict):
        raise BatchError("InvalidSpec", "spec must be an object", "", "config")
    for name in ("job", "processor"):
        if not isinstance(spec.get(name), str) or not spec[name]:
            raise invalid(name, "must be a non-empty string")
    for name in ("batch_id", "lower", "upper"):
        value = spec.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(name, f"must be an integer, got {value!r}")
    if spec.get("format") not in FORMATS:
        raise invalid("format", f"must be one of {', '.join(FORMATS)}, got {spec.get('format')!r}")
    items = spec.get("items")
    if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
        raise invalid("items", "must be a non-empty list of locations")
    for name in ("params", "read_options"):
        if spec.get(name) is not None and not isinstance(spec[name], dict):
            raise invalid(name, "must be an object")
    if not isinstance(spec.get("sink"), dict):
        raise invalid("sink", "must be an object with a 'kind'")
    column = spec.get("watermark_column") or (spec.get("params") or {}).get("watermark_column")
    if column is not None and not isinstance(column, str):
        raise invalid("watermark_column", "must be a column name")


def _batch_error(stage: str, exc: BaseException, *, processor: str | None = None) -> BatchError:
    if isinstance(exc, BatchError):
        return exc
    cause = exc.__cause__
    if isinstance(exc, _OWN_ERRORS):
        message = str(exc)
        detail = getattr(exc, "detail", None)
        if detail is None:
            detail = spark_error_detail(cause) if cause is not None else ""
        return BatchError(type(exc).__name__, message, detail, stage)
    message = spark_error_summary(exc)
    if processor is not None:
        message = f"processor {processor!r} failed: {message}"
    return BatchError(spark_error_type(exc), message, spark_error_detail(exc), stage)
