"""The worker's reader for each source kind other than a list of files (no Django here).

A batch spec with a `source` object ({"kind": ..., plus what that kind's reader needs}) is read by
the module registered here, whose `read(spark, spec) -> DataFrame` returns the batch's rows. A
reader also says what the batch covered as the job's watermark: `covered_watermark(spec)` (a
Kafka batch's next offset per partition; None when the data's watermark column decides). Secrets reach a reader only as environment-variable
names. The control side of each kind (`inventory/sources/registry.py`) names the same kinds.
"""

from typing import Protocol, runtime_checkable

from pyspark.sql import DataFrame, SparkSession

from workers.spark.errors import ReadError
from workers.spark.sources import delta, hudi, iceberg, job_output, kafka, object_store, table


@runtime_checkable
class SourceReader(Protocol):
    """A kind's reader (see above)."""

    def read(self, spark: SparkSession, spec: dict) -> DataFrame: ...

    def covered_watermark(self, spec: dict): ...


READERS: dict[str, SourceReader] = {
    "object_store": object_store,
    "table": table,
    "kafka": kafka,
    "job_output": job_output,
    "delta": delta,
    "hudi": hudi,
    "iceberg": iceberg,
}


def _reader(spec: dict) -> SourceReader:
    source = spec.get("source")
    kind = source.get("kind") if isinstance(source, dict) else None
    if kind not in READERS:
        raise ReadError(
            f"unknown source kind {kind!r}; the worker reads {', '.join(sorted(READERS))}"
        )
    return READERS[kind]


def read_source(spark: SparkSession, spec: dict) -> DataFrame:
    return _reader(spec).read(spark, spec)


def covered_watermark(spec: dict):
    """The watermark value a batch's planned coverage gives (None: the data's column decides)."""
    return _reader(spec).covered_watermark(spec)
