"""Where the time of a Spark executor read goes (bench_table_reads.py's profile).

Over the same part of a batch (its first files), in this order:

- reader: the worker's DataSourceReader run in this one Python process, partition after
  partition, its Arrow batches dropped (the file read, hudi-rs's merge or pyarrow's read, the
  commit-time filter, the casts: the Python side of the executor read, with no Spark);
- noop: the batch through Spark into the `noop` sink (adds the Python worker processes, Arrow
  batches into the JVM and the rows made of them);
- hash: the bench's aggregate (adds xxhash64 over every column and the count).

The differences say what each layer costs; figures are seconds of the same data.
"""

from __future__ import annotations

import json
import time


def _plan_of_read(reader_module, spark, spec: dict):
    """The data source class and plan the reader's `read` hands to `python_sources.load`."""
    captured = {}
    original = reader_module.load

    def capture(spark_, base, secrets, plan):
        captured.update(base=base, plan=plan)
        return original(spark_, base, secrets, plan)

    reader_module.load = capture
    try:
        df = reader_module.read(spark, spec)
    finally:
        reader_module.load = original
    return df, captured["base"], captured["plan"]


def profile(spark, reader_module, spec: dict, key: str, part: int) -> dict:
    """Seconds of each layer over the batch's first `part` entries of source[key]."""
    from pyspark.sql import functions as F

    source = dict(spec["source"])
    source[key] = source[key][:part]
    spec = {**spec, "source": source}
    df, base, plan = _plan_of_read(reader_module, spark, spec)

    started = time.perf_counter()
    data_source = base({"plan": json.dumps(plan)})
    reader = data_source.reader(data_source.schema())
    rows = 0
    for partition in reader.partitions():
        for batch in reader.read(partition):
            rows += batch.num_rows
    reader_seconds = time.perf_counter() - started

    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    noop_seconds = time.perf_counter() - started

    started = time.perf_counter()
    df.agg(F.count(F.lit(1)), F.bit_xor(F.xxhash64(*[F.col(c) for c in df.columns]))).first()
    hash_seconds = time.perf_counter() - started
    return {
        "files": part,
        "rows": rows,
        "reader": reader_seconds,
        "noop": noop_seconds,
        "hash": hash_seconds,
    }
