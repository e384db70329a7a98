"""The soak's processors, loaded in its workers through TIDEMARK_PROCESSOR_MODULES.

`soak_tag` passes every input row through unchanged and adds the batch and the attempt that wrote
it (`src_batch`, `src_attempt`), so that the checker (bench/soak_checker.py) can tell the
committed attempt's output from a stale one's. The attempt is read from the inventory when the
processor starts: this process's own attempt (the chaos suite's processors do the same).

`soak_kafka` does the same for the Kafka source's messages, whose value is a row as JSON
(bench/soak_sources.py): it unpacks the row's columns and keeps the message's `partition` and
`offset`, which the checker counts in the row's checksum.

With SOAK_CLOCK_PROBE set (a worker whose clock may jump), it also writes the wall clock it reads
to that file: the clock_jump fault counts when the file's content and its real mtime differ by
the jump.
"""

import os
import time
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from workers.spark.processors import ProcessorContext, register

ROW = StructType([StructField(c, StringType()) for c in ("row_id", "key", "value", "note")])


@register("soak_tag")
def tag(df, ctx: ProcessorContext):
    from inventory.models import Batch

    attempt = Batch.objects.values_list("attempt", flat=True).get(pk=ctx.batch_id)
    probe = os.environ.get("SOAK_CLOCK_PROBE")
    if probe:
        Path(probe).write_text(repr(time.time()))
    return df.withColumn("src_batch", F.lit(ctx.batch_id).cast("long")).withColumn(
        "src_attempt", F.lit(attempt).cast("long")
    )


@register("soak_kafka")
def kafka_rows(df, ctx: ProcessorContext):
    row = F.from_json(F.col("value").cast("string"), ROW)
    unpacked = df.select(
        *(row[c].alias(c) for c in ROW.fieldNames()),
        F.col("partition").cast("long").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
    )
    return tag(unpacked, ctx)
