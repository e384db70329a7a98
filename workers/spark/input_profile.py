"""What a batch reports about its input (row count, the watermark column's maximum), for free.

Local Parquet input without a watermark column: the row count is the sum of the files' footers
(read on the driver, no Spark job). Otherwise the numbers are observed while the batch's own write
runs (`DataFrame.observe`): the input gets a `CollectMetrics` node that counts rows and takes the
maximum as they stream past, so no Spark job of its own reads the input a second time.

A sink whose write is an RDD action (the PostgreSQL sink's `foreachPartition`) does not report
the observation to its `Observation`: it reads the metrics off the plan it ran
(`observed_metrics`) and passes them back, and `result` takes them from there.

An observation only sees the rows the write pulls through it. When the processor's output may
stop reading its input early (a limit, a sample) or does not read it at all, or when Spark skipped
the observed part of the plan at run time (an empty join side), the observation is incomplete or
never fires; then, and only then, one separate aggregation over the input gives the exact numbers.
"""

import json
import os
import re
import time
import uuid

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from workers.spark.errors import ReadError
from workers.spark.sources.files import local_path

# logical plan nodes above the input that may end its reading before the last row
_EARLY_STOP = re.compile(r"(?m)^[\s:+\-|]*(GlobalLimit|LocalLimit|Limit|Sample|Offset|Tail)\b")
# how long to wait for an observation to be reported once the write has returned (it is normally
# reported before the write returns; waiting longer only delays the fallback)
_REPORT_WAIT_SECONDS = 0.5


class InputProfile:
    """`observed` is the input with the observation attached: the processor reads that one."""

    def __init__(
        self, df: DataFrame, watermark_column: str | None, *, known_rows: int | None = None
    ):
        self.df = df
        self.known_rows = known_rows
        self.column = watermark_column
        self.data_type = None
        if watermark_column:
            if watermark_column not in df.columns:
                raise ReadError(
                    f"watermark_column {watermark_column!r} is not an input column; "
                    f"the input has {df.columns}"
                )
            self.data_type = df.schema[watermark_column].dataType
        self.name = f"tm_input_{uuid.uuid4().hex[:12]}"
        self._observation = None
        self.observed = df
        if watermark_column or known_rows is None:
            self._observation = Observation(self.name)
            self.observed = df.observe(self._observation, *self._aggregates())

    def _aggregates(self) -> list:
        aggregates = [F.count(F.lit(1)).alias("rows")]
        if self.column:
            aggregates.append(_max_as_json(self.df, self.column).alias("watermark"))
        return aggregates

    def result(self, out: DataFrame, observed: dict | None = None) -> tuple[int, object]:
        """(rows, watermark) of the input, after `out` (the processor's output) was written;
        `observed`: the metrics the sink read off the plan it ran, if its write was not a
        DataFrame action (`observed_metrics`)."""
        if self._observation is None:
            return self.known_rows, None
        row = self._observed_row(out, observed or {})
        if row is None:
            row = self.df.agg(*self._aggregates()).first().asDict()
        watermark = row.get("watermark") if self.column else None
        if isinstance(watermark, str):
            watermark = _iso_with_zone(watermark)
        return int(row["rows"]), watermark

    def counted_by_observation(self, out: DataFrame) -> bool:
        """Whether the write of `out` reads every input row through the observation."""
        plan = out._jdf.queryExecution().analyzed().toString()
        if f"CollectMetrics {self.name}," not in plan:
            return False
        above = plan.split(f"CollectMetrics {self.name},", 1)[0]
        return _EARLY_STOP.search(above) is None

    def _observed_row(self, out: DataFrame, observed: dict) -> dict | None:
        if not self.counted_by_observation(out):
            return None
        if self.name in observed:
            return observed[self.name]
        future = self._observation._jo.future()
        deadline = time.monotonic() + _REPORT_WAIT_SECONDS
        while not future.isCompleted():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        return dict(self._observation.get)


def observed_metrics(executed: DataFrame) -> dict[str, dict]:
    """{observation name: its metrics} of the observations in the plan `executed` ran, after an
    RDD action over it (`executed.foreachPartition(...)`): the plan's `CollectMetrics` nodes hold
    what they saw. Empty if nothing ran."""
    jvm = executed.sparkSession._jvm
    metrics = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        executed._jdf.queryExecution().observedMetrics()
    )
    return {name: json.loads(metrics.get(name).json()) for name in metrics.keySet()}


def parquet_footer_rows(locations: list[str]) -> int | None:
    """The rows of local Parquet files as their footers state them; None if any is not one."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    total = 0
    for location in locations:
        path = local_path(location)
        if path is None or not os.path.isfile(path):
            return None
        try:
            total += pq.read_metadata(path).num_rows
        except Exception:  # noqa: BLE001 - Spark's own read names what is wrong with the file
            return None
    return total


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
    from datetime import datetime

    return datetime.fromisoformat(value).isoformat()
