"""Processors for worker tests, imported by worker processes through TIDEMARK_PROCESSOR_MODULES.

`test_gate` holds a batch in its processor until a file appears (or a timeout passes), so a test
can act while the batch is running: kill the worker, take its lease away. `test_slow_rows` makes
the batch's Spark work itself slow (a Python UDF sleeping per row) and notes when each row ran.
"""

import os
import time

from pyspark.sql import functions as F

from workers.spark.processors import ProcessorContext, register


@register("test_gate")
def gate(df, ctx: ProcessorContext):
    """Wait for params["gate"] (a file path) to exist, up to params["timeout"] seconds.

    Writes `started-<batch id>` (this process's pid) next to the gate first, so a test knows the
    batch is inside the processor.
    """
    path = ctx.params.get("gate")
    if path:
        started = os.path.join(os.path.dirname(path), f"started-{ctx.batch_id}")
        with open(started, "a") as marker:
            marker.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + float(ctx.params.get("timeout", 60))
    while not (path and os.path.exists(path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return df


@register("test_slow_rows")
def slow_rows(df, ctx: ProcessorContext):
    """Sleeps params["row_seconds"] per row inside Spark, appending each row's time to
    params["marker"]: a test sees when the batch's Spark jobs run, and when they stop."""
    marker, seconds = ctx.params["marker"], float(ctx.params["row_seconds"])

    @F.udf("long")
    def slow(value):
        import time as clock

        with open(marker, "a") as notes:
            notes.write(f"{clock.time()}\n")
        clock.sleep(seconds)
        return value

    return df.select(slow(df.columns[0]).alias(df.columns[0]))


@register("test_leak_env")
def leak_env(df, ctx: ProcessorContext):
    """Fails with the value of the environment variable params["env"] in its message, as a
    careless driver library would: the secret must not get past the worker's error handling."""
    value = os.environ.get(ctx.params["env"], "")
    raise RuntimeError(f"could not connect with {value!r}")
