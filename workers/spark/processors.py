"""Processors: named PySpark functions `fn(df, ctx) -> DataFrame`, looked up by a job's processor name.

Any installed package can add processors: a module that registers them with `@register(...)`,
named by an entry point of the group `tidemark.processors` in the package's metadata
(examples/tidemark-example-processors). Modules named in TIDEMARK_PROCESSOR_MODULES are loaded too.

A processor only transforms: reading the batch's items and writing the sink happen around it
(workers/spark/run.py). Parameter problems raise ProcessorError naming the parameter, both when
the batch runs and, through `validate_params`, when a job is saved.
"""

import importlib
import importlib.metadata
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.spark.sql_analyzed import check_analyzed
from workers.spark.sql_guard import SqlRefused, check_query
from workers.spark.sql_plan import check_plan


@dataclass(frozen=True)
class ProcessorContext:
    job: str
    batch_id: int
    lower: int
    upper: int
    params: dict = field(default_factory=dict)
    kind: str = "incremental"


Processor = Callable[[DataFrame, ProcessorContext], DataFrame]
ParamsValidator = Callable[[dict], None]


class ProcessorError(Exception):
    """A processor cannot run with the given params or input; the message names what is wrong.
    `param` names the parameter at fault when there is one (the API's field is `params.<param>`)."""

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.param = param


class UnknownProcessor(ProcessorError):
    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        listed = ", ".join(known) if known else "none"
        super().__init__(f"unknown processor {name!r}; known processors: {listed}")

    def __reduce__(self):
        return (type(self), (self.name, self.known))


_registry: dict[str, Processor] = {}
_validators: dict[str, ParamsValidator] = {}


def register(name: str, *, validate: ParamsValidator | None = None):
    """Register `fn(df, ctx) -> DataFrame` under `name`; `validate(params)` checks params early."""

    def decorator(fn: Processor) -> Processor:
        existing = _registry.get(name)
        if existing is not None and existing.__qualname__ != fn.__qualname__:
            raise ValueError(f"processor {name!r} is already registered by {existing.__module__}")
        _registry[name] = fn
        if validate is not None:
            _validators[name] = validate
        return fn

    return decorator


def get_processor(name: str) -> Processor:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownProcessor(name, processor_names()) from None


def processor_names() -> list[str]:
    return sorted(_registry)


ENTRY_POINT_GROUP = "tidemark.processors"
_entry_points_loaded: list[str] | None = None


def load_processor_modules(modules: list[str] | None = None) -> list[str]:
    """Import the modules that register processors; returns processor_names().

    First every entry point of the group `tidemark.processors` of the installed packages, then
    `modules`; without that argument, the comma-separated TIDEMARK_PROCESSOR_MODULES environment
    variable names them (how a spark-submit process learns what its parent worker had loaded).
    """
    load_entry_points()
    if modules is None:
        raw = os.environ.get("TIDEMARK_PROCESSOR_MODULES", "")
        modules = [m.strip() for m in raw.split(",") if m.strip()]
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ProcessorError(f"cannot import processor module {module!r}: {exc}") from exc
    return processor_names()


def load_entry_points() -> list[str]:
    """Load the `tidemark.processors` entry points of the installed packages (each names a module
    whose `@register` decorators run on import, or an object in one); returns their names.

    A package that cannot be loaded is an error naming it, not a processor missing later. The
    scan runs once per process (packages installed later need a restart, as any code change)."""
    global _entry_points_loaded
    if _entry_points_loaded is not None:
        return _entry_points_loaded
    loaded = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except Exception as exc:
            dist = entry.dist.name if entry.dist is not None else "an installed package"
            raise ProcessorError(
                f"cannot load processor entry point {entry.name!r} ({entry.value}) of {dist}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        loaded.append(entry.name)
    _entry_points_loaded = loaded
    return loaded


def validate_params(name: str, params: dict | None) -> None:
    """Check a processor's params without Spark (for saving a job); raises ProcessorError."""
    get_processor(name)
    if params is not None and not isinstance(params, dict):
        raise ProcessorError(f"params must be an object, got {type(params).__name__}")
    validator = _validators.get(name)
    if validator is not None:
        validator(params or {})


def require_columns(df: DataFrame, columns: list[str], *, processor: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ProcessorError(
            f"processor {processor!r} needs input columns {missing}; the batch has {df.columns}"
        )


def _string_param(params: dict, name: str, default: str | None = None) -> str:
    value = params.get(name, default)
    if not isinstance(value, str) or not value.strip():
        raise ProcessorError(f"param {name!r} must be a non-empty string, got {value!r}")
    return value


def _string_list_param(params: dict, name: str, default: list[str]) -> list[str]:
    value = params.get(name, default)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ProcessorError(f"param {name!r} must be a non-empty list of column names")
    return value


# ---- shipped processors --------------------------------------------------------------------------


@register("passthrough")
def passthrough(df: DataFrame, ctx: ProcessorContext) -> DataFrame:
    """The batch's rows unchanged (with lineage columns if the job asked for them)."""
    return df


SQL_INPUTS = ("batch",)


def _validate_sql(params: dict) -> None:
    query_to_run(params)


def query_to_run(params: dict) -> str:
    """The text to run for params["query"]: the checked query written out again by the guard
    (workers/spark/sql_guard), never the user's text; refused unless it is one query over the
    batch."""
    query = _string_param(params, "query")
    try:
        return check_query(query, inputs=SQL_INPUTS)
    except SqlRefused as exc:
        raise ProcessorError(f"param 'query' {exc}", param="query") from None


# temp views are per session and a worker may run batches from several threads
_view_lock = threading.Lock()


@register("sql", validate=_validate_sql)
def sql(df: DataFrame, ctx: ProcessorContext) -> DataFrame:
    """params["query"]: a Spark SQL statement over the batch's rows as the view `batch`.

    The query may use the named parameters :batch_id, :lower and :upper.
    """
    # checked again here: a job stored before the check existed may hold any text
    query = query_to_run(ctx.params)
    spark = df.sparkSession
    try:
        # and as Spark's own parser reads the text it is about to run (workers/spark/sql_plan)
        check_plan(spark, query, inputs=SQL_INPUTS)
    except SqlRefused as exc:
        raise ProcessorError(f"param 'query' {exc}", param="query") from None
    values = {"batch_id": ctx.batch_id, "lower": ctx.lower, "upper": ctx.upper}
    # bind only the markers the query uses: a query without any stays an unparameterized one,
    # where `:` keeps its other meanings (e.g. variant paths)
    args = {k: v for k, v in values.items() if re.search(rf":{k}\b", query)}
    with _view_lock:
        df.createOrReplaceTempView(SQL_INPUTS[0])
        try:
            # spark.sql analyses eagerly, so the result keeps its plan after the view is dropped
            result = spark.sql(query, args=args or None)
        finally:
            spark.catalog.dropTempView(SQL_INPUTS[0])
    try:
        # and as Spark's analyzer resolved it, before anything runs: a bare `current_user` that
        # no input column answers to is the function (workers/spark/sql_analyzed)
        check_analyzed(result)
    except SqlRefused as exc:
        raise ProcessorError(f"param 'query' {exc}", param="query") from None
    return result


def _validate_orders_hourly(params: dict) -> None:
    _string_param(params, "time_column", "event_time")


@register("orders_hourly", validate=_validate_orders_hourly)
def orders_hourly(df: DataFrame, ctx: ProcessorContext) -> DataFrame:
    """Order events -> one row per hour of the batch's events: hour, orders, revenue, customers.

    An order counted twice (the same event in two files) counts once; its amount once too.
    The hours are those of this batch's events: an hour spread over two batches gets one row in
    each batch's output.
    """
    time_column = _string_param(ctx.params, "time_column", "event_time")
    require_columns(
        df, ["order_id", "customer_id", "amount", time_column], processor="orders_hourly"
    )
    orders = df.dropDuplicates(["order_id"])
    return (
        orders.groupBy(F.date_trunc("hour", F.col(time_column)).alias("hour"))
        .agg(
            F.count("order_id").alias("orders"),
            F.round(F.sum("amount"), 2).alias("revenue"),
            F.countDistinct("customer_id").alias("customers"),
        )
        .orderBy("hour")
    )


def _validate_customers_latest(params: dict) -> None:
    _string_param(params, "key", "customer_id")
    _string_param(params, "time_column", "event_time")
    _string_list_param(params, "fields", ["email", "name", "city"])


@register("customers_latest", validate=_validate_customers_latest)
def customers_latest(df: DataFrame, ctx: ProcessorContext) -> DataFrame:
    """Partial customer updates -> per customer the latest non-null value of every field.

    Output: the key, each field, and `updated_at` (the latest event time seen for the customer).
    A field that is null in every event of the batch stays null; with the `coalesce` sink mode
    the stored value then survives.
    """
    params = ctx.params
    key = _string_param(params, "key", "customer_id")
    time_column = _string_param(params, "time_column", "event_time")
    fields = _string_list_param(params, "fields", ["email", "name", "city"])
    require_columns(df, [key, time_column, *fields], processor="customers_latest")
    latest = [
        # max over (time, value) structs, nulls skipped: the value of the latest non-null update
        F.max(
            F.when(F.col(name).isNotNull(), F.struct(F.col(time_column).alias("t"), F.col(name)))
        )[name].alias(name)
        for name in fields
    ]
    return (
        df.where(F.col(key).isNotNull())
        .groupBy(key)
        .agg(*latest, F.max(time_column).alias("updated_at"))
        .orderBy(key)
    )
