"""Reading an upstream job's committed outputs (a `job_output` source). No Django here.

spec["source"] = {
    "kind": "job_output", "job": upstream job name,
    "outputs": [{"batch_id", "commit_seq", "location", "format", "options"?}, ...] (commit order),
    "schema_from": one such output or None (the schema of a range whose commits wrote no rows),
}

Each output is the published directory of one upstream batch (`<sink path>/batch_id=<id>`, its
partition columns below it); the batch's rows are exactly that directory's. An output that is
gone (deleted outside Tidemark, or replaced by an upstream replay after the spec was built) is a
read error naming the commit: the next attempt's spec leaves a replaced output out.
"""

from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from workers.spark.errors import ReadError
from workers.spark.options import OptionError, normalized_reader_options
from workers.spark.sources.files import literal_path

FORMATS = ("parquet", "json", "csv", "orc")


def read(spark: SparkSession, spec: dict) -> DataFrame:
    source = spec["source"]
    outputs = source.get("outputs")
    if not isinstance(outputs, list):
        raise ReadError("job_output source needs 'outputs': a list of upstream outputs")
    for output in outputs:
        _check(spark, output, upstream=source.get("job"))
    if not outputs:
        return _empty(spark, source.get("schema_from"))
    frames = []
    # one read per format and options: Spark lists and plans the directories together
    groups: dict[tuple, list[str]] = {}
    for output in outputs:
        key = (
            output["format"],
            tuple(sorted(_options(output, upstream=source.get("job")).items())),
        )
        # an upstream sink's path may hold glob characters: read its directory, not a pattern
        groups.setdefault(key, []).append(literal_path(output["location"]))
    for (fmt, options), locations in groups.items():
        frames.append(spark.read.format(fmt).options(**dict(options)).load(locations))
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def _options(output: dict, *, upstream) -> dict[str, str]:
    """The reader options of an upstream output (its sink's CSV header): the one allowlist."""
    try:
        return normalized_reader_options(output["format"], output.get("options"))
    except OptionError as exc:
        raise ReadError(
            f"commit {output.get('commit_seq')} of job {upstream}: read options {exc}"
        ) from None


def _check(spark: SparkSession, output, *, upstream) -> None:
    if not isinstance(output, dict) or not isinstance(output.get("location"), str):
        raise ReadError(f"job_output output {output!r} has no location")
    if output.get("format") not in FORMATS:
        raise ReadError(
            f"commit {output.get('commit_seq')} of job {upstream}: cannot read format "
            f"{output.get('format')!r}; readable: {', '.join(FORMATS)}"
        )
    hadoop_path = spark._jvm.org.apache.hadoop.fs.Path
    path = hadoop_path(output["location"])
    if not path.getFileSystem(spark._jsc.hadoopConfiguration()).exists(path):
        raise ReadError(
            f"the output of commit {output.get('commit_seq')} of job {upstream} (batch "
            f"{output.get('batch_id')}) is gone from {output['location']}: replaced by an "
            "upstream replay since this batch was planned (its next attempt leaves it out), or "
            "deleted outside Tidemark"
        )


def _empty(spark: SparkSession, schema_from) -> DataFrame:
    """No rows, with the upstream output's columns when one exists."""
    if isinstance(schema_from, dict) and schema_from.get("format") in FORMATS:
        try:
            reader = spark.read.format(schema_from["format"])
            schema = (
                reader.options(**_options(schema_from, upstream=None))
                .load(literal_path(schema_from["location"]))
                .schema
            )
            return spark.createDataFrame([], schema)
        except Exception:  # noqa: BLE001 - a schema hint only: no columns is still no rows
            pass
    return spark.createDataFrame([], T.StructType([]))


def covered_watermark(spec: dict) -> None:
    """None: the data's watermark column decides what the batch covered."""
    return None
