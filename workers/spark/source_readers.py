"""The worker's reader for each source kind other than a list of files (no Django here).

A batch spec with a `source` object ({"kind": ..., plus what that kind's reader needs}) is read by
the module named here, whose `read(spark, spec) -> DataFrame` returns the batch's rows. A reader
may also say what the batch covered as the job's watermark: `covered_watermark(spec)` (a Kafka
batch's next offset per partition). Secrets reach a reader only as environment-variable names.
"""

from importlib import import_module

from pyspark.sql import DataFrame, SparkSession

from workers.spark.errors import ReadError

READERS = {
    "object_store": "workers.spark.read_object_store",
    "table": "workers.spark.read_table",
    "kafka": "workers.spark.read_kafka",
    "job_output": "workers.spark.read_job_output",
    "delta": "workers.spark.read_delta",
}


def _reader(spec: dict):
    source = spec.get("source")
    kind = source.get("kind") if isinstance(source, dict) else None
    if kind not in READERS:
        raise ReadError(
            f"unknown source kind {kind!r}; the worker reads {', '.join(sorted(READERS))}"
        )
    return import_module(READERS[kind])


def read_source(spark: SparkSession, spec: dict) -> DataFrame:
    return _reader(spec).read(spark, spec)


def covered_watermark(spec: dict):
    """The watermark value a batch's planned coverage gives (None: the data's column decides)."""
    reader = _reader(spec)
    return reader.covered_watermark(spec) if hasattr(reader, "covered_watermark") else None
