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
from pyspark.sql import types as T

from workers.spark.errors import (
    BatchError,
    ReadError,
    SinkError,
    executor_read_error,
    input_failed,
    input_failure_detail,
    input_failure_summary,
    spark_error_detail,
    spark_error_summary,
    spark_error_type,
)
from workers.spark.fence import publish_from_spec
from workers.spark.input_profile import InputProfile, parquet_footer_rows
from workers.spark.options import OptionError, normalized_reader_options
from workers.spark.processors import (
    ProcessorContext,
    ProcessorError,
    UnknownProcessor,
    get_processor,
    load_processor_modules,
    validate_params,
)
from workers.spark.sinks import check_sink, write_sink
from workers.spark.sources.files import FORMATS, add_lineage, read_items
from workers.spark.sources.registry import covered_watermark, read_source

_OWN_ERRORS = (ReadError, SinkError, ProcessorError)


def run_batch(spark: SparkSession, spec: dict) -> dict:
    started = time.monotonic()
    _check_spec(spec)
    params = spec.get("params") or {}
    try:
        processor = _processor(spec["processor"])
        # the params as checked when the job was saved, checked again before anything is read
        # (a job stored before a rule, or around the API: a refused or oversized SQL query)
        validate_params(spec["processor"], params)
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
        if spec.get("source") is not None:
            # a table, a topic, an object store or an upstream job's output
            df = read_source(spark, spec)
            if lineage is not None:
                df = add_lineage(df, lineage, source_file=False)
        else:
            df = read_items(
                spark,
                spec["items"],
                spec["format"],
                options=spec.get("read_options"),
                schema=spec.get("schema"),
                lineage=lineage,
            )
        # what the batch reports about its input (rows, the watermark column's maximum) is
        # observed while the write runs: no Spark job of its own
        known_rows = None
        if spec["format"] == "parquet" and not watermark_column and "source" not in spec:
            known_rows = parquet_footer_rows(spec["items"])
        profile = InputProfile(df, watermark_column, known_rows=known_rows)
    except Exception as exc:
        raise _batch_error("read", exc) from exc
    if watermark_column:
        # before anything is written: a column the job's watermark cannot hold fails here, clearly
        _check_watermark_type(spec.get("watermark_type"), watermark_column, profile.data_type)

    ctx = ProcessorContext(
        job=spec["job"],
        batch_id=spec["batch_id"],
        lower=spec["lower"],
        upper=spec["upper"],
        params=params,
        kind=spec.get("kind", "incremental"),
    )
    try:
        out = processor(profile.observed, ctx)
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
            job=spec["job"],
            own_database=spec.get("own_database"),
        )
    except Exception as exc:
        # a Kafka or object-store partition read on an executor: the reader's own message
        executor_error = executor_read_error(exc)
        if executor_error is not None:
            raise _batch_error("read", executor_error) from exc
        if input_failed(exc):
            # Spark reads lazily: a malformed file surfaces in the write, but it is a read error
            error = ReadError(f"cannot read {spec['format']} input: {input_failure_summary(exc)}")
            error.detail = input_failure_detail(exc)
            raise _batch_error("read", error) from exc
        raise _batch_error("write", exc) from exc
    observed = written.pop("observed", None)
    try:
        rows_in, watermark = profile.result(out, observed)
    except Exception as exc:
        raise _batch_error("read", exc) from exc

    result = {
        "rows_in": rows_in,
        **written,
        "seconds": round(time.monotonic() - started, 3),
    }
    if watermark_column:
        result["watermark"] = watermark
    elif spec.get("source") is not None:
        covered = covered_watermark(spec)
        if covered is not None:
            result["watermark"] = covered
    return result


def _check_watermark_type(watermark_type: str | None, column: str, data_type) -> None:
    """The job's watermark type must be able to hold what `column` reports (known from its type)."""
    if watermark_type in (None, "int"):
        return
    integral = isinstance(data_type, T.IntegralType)
    if watermark_type == "datetime" and not integral:
        return
    kind = "an integer" if integral else "a single value"
    if watermark_type == "datetime":
        reason = "a datetime watermark needs a timestamp or date column"
    else:
        reason = f"a {watermark_type} watermark is not read from a column"
    raise BatchError(
        "WatermarkTypeMismatch",
        f"watermark_column {column!r} reports {kind} ({data_type.simpleString()}); {reason}: "
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
    try:
        # before Spark: a key that would reach Hadoop's or Spark's configuration never runs
        normalized_reader_options(spec["format"], spec.get("read_options"))
    except OptionError as exc:
        raise invalid("read_options", f"refuses {exc}") from None
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
