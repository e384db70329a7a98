"""The worker's reader for Kafka batches: the batch's offset slices, exactly, as a DataFrame.

A spec's `source` is {"kind": "kafka", "bootstrap_servers", "topic", "slices": [{"partition",
"start", "end"}, ...], "read_timeout_seconds", optional SASL env-var names, "spark_native"}. The
slices of one partition in a batch are contiguous (a batch is a contiguous id range and each
partition's slices are registered in offset order), so each partition's range `[start, end)`
is checked on the driver (still on the broker, not truncated: metadata only), cut into pieces of
at most `partition_rows` offsets (default `PARTITION_ROWS`) and each piece is read by an executor
(`kafka_source.py`): the rows never pass through the driver. SASL credentials are read from the
named variables on the driver and shipped inside the data source, never in an option or the conf.

The columns are those of Spark's Kafka source: key, value (binary), topic, partition, offset,
timestamp, timestampType. With `spark_native: true` Spark's own Kafka batch source reads the same
ranges (the cluster needs the spark-sql-kafka package).
"""

import json
import os

from pyspark.sql import DataFrame, SparkSession

from workers.spark import python_sources
from workers.spark.errors import ReadError
from workers.spark.sources.kafka_client import (
    DEFAULT_TIMEOUT_SECONDS,
    KafkaSourceError,
    below_log_start,
    client_config,
    open_consumer,
    partition_bounds,
)
from workers.spark.sources.kafka_source import KafkaSource

# offsets per Spark partition: a task's consumer holds one record batch at a time, so this bounds
# the work a task retries, not its memory
PARTITION_ROWS = 200_000
# spec keys the driver uses and executors do not need
_PLAN_ONLY_KEYS = ("slices", "partition_rows", "read_timeout_seconds", "spark_native", "kind")


def slice_ranges(source: dict) -> dict[int, tuple[int, int]]:
    """{partition: (start, end)} of the spec's slices; ReadError if a partition's are not one
    contiguous run (the spec would skip or repeat offsets)."""
    slices = source.get("slices")
    if not isinstance(slices, list) or not slices:
        raise ReadError("kafka spec: 'slices' must be a non-empty list")
    ranges: dict[int, tuple[int, int]] = {}
    for piece in sorted(slices, key=lambda s: (s["partition"], s["start"])):
        partition, start, end = int(piece["partition"]), int(piece["start"]), int(piece["end"])
        if not 0 <= start < end:
            raise ReadError(f"kafka spec: partition {partition} slice [{start}, {end}) is empty")
        if partition in ranges:
            low, high = ranges[partition]
            if start != high:
                raise ReadError(
                    f"kafka spec: partition {partition} slices are not contiguous "
                    f"({low}-{high} then {start}-{end})"
                )
            ranges[partition] = (low, end)
        else:
            ranges[partition] = (start, end)
    return ranges


def covered_watermark(spec: dict) -> dict[str, int]:
    """What the batch covered: the next offset of each partition it read."""
    return {str(p): end for p, (_start, end) in slice_ranges(spec["source"]).items()}


def read(spark: SparkSession, spec: dict) -> DataFrame:
    source = spec["source"]
    ranges = slice_ranges(source)
    if source.get("spark_native"):
        return spark.read.format("kafka").options(**native_options(source, ranges)).load()
    timeout = float(source.get("read_timeout_seconds") or 300)
    secrets = credentials(source)
    check_offsets(source, ranges, secrets, timeout=timeout)
    settings = {key: value for key, value in source.items() if key not in _PLAN_ONLY_KEYS}
    plan = {
        "source": settings,
        "ranges": split_ranges(ranges, int(source.get("partition_rows") or PARTITION_ROWS)),
        "timeout": timeout,
    }
    return python_sources.load(spark, KafkaSource, secrets, plan)


def credentials(source: dict, *, environ=None) -> dict:
    """{variable: value} of the credential variables the source names, read in this process."""
    environ = os.environ if environ is None else environ
    try:
        client_config(source, environ=environ)  # says which variable is missing, naming its key
    except KafkaSourceError as exc:
        raise ReadError(f"{exc.field}: {exc.message}") from None
    names = [source.get(key) for key in ("sasl_username_env", "sasl_password_env")]
    if source.get("security_protocol") not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return {}
    return {name: environ[name] for name in names if name}


def split_ranges(ranges: dict[int, tuple[int, int]], budget: int) -> list[list[int]]:
    """[[partition, start, end], ...]: each partition's range cut into pieces of at most `budget`
    offsets, one Spark partition each, interleaved across Kafka partitions."""
    if budget < 1:
        raise ReadError(f"partition_rows must be a positive number of offsets, got {budget}")
    per_partition = [
        [[partition, offset, min(offset + budget, end)] for offset in range(start, end, budget)]
        for partition, (start, end) in sorted(ranges.items())
    ]
    rounds = max(len(pieces) for pieces in per_partition)
    return [pieces[i] for i in range(rounds) for pieces in per_partition if i < len(pieces)]


def check_offsets(source: dict, ranges: dict, secrets: dict, *, timeout: float) -> None:
    """Before any row is read (on the driver, metadata only): the batch's offsets are all still on
    the broker, and no partition ends before the batch's end."""
    topic = source["topic"]
    consumer = open_consumer(source, environ=secrets)
    try:
        try:
            bounds = partition_bounds(
                consumer, topic, sorted(ranges), timeout=min(timeout, DEFAULT_TIMEOUT_SECONDS)
            )
        except KafkaSourceError as exc:
            raise ReadError(exc.message) from None
    finally:
        consumer.close()
    lost = below_log_start(ranges, bounds)
    if lost:
        raise ReadError(f"topic {topic}, {lost}")
    for partition, (_start, end) in sorted(ranges.items()):
        high = bounds[partition][1]
        if high < end:
            # the end a discovery saw never moves back in a healthy partition
            raise ReadError(
                f"topic {topic}, partition {partition} ends at offset {high}, before the "
                f"batch's end {end}: the topic was recreated or truncated"
            )


def native_options(source: dict, ranges: dict[int, tuple[int, int]], *, environ=None) -> dict:
    """Options of Spark's Kafka batch source for exactly these ranges; `failOnDataLoss` makes an
    offset below the log start an error there too."""
    topic = source["topic"]
    options = {
        "kafka.bootstrap.servers": source["bootstrap_servers"],
        "assign": json.dumps({topic: sorted(ranges)}),
        "startingOffsets": json.dumps(
            {topic: {str(p): s for p, (s, _e) in sorted(ranges.items())}}
        ),
        "endingOffsets": json.dumps({topic: {str(p): e for p, (_s, e) in sorted(ranges.items())}}),
        "failOnDataLoss": "true",
    }
    protocol = source.get("security_protocol")
    if protocol:
        options["kafka.security.protocol"] = protocol
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        try:
            settings = client_config(source, environ=os.environ if environ is None else environ)
        except KafkaSourceError as exc:
            raise ReadError(f"{exc.field}: {exc.message}") from None
        mechanism = settings["sasl.mechanism"]
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required "
            f"username={json.dumps(settings['sasl.username'])} "
            f"password={json.dumps(settings['sasl.password'])};"
        )
    return options
