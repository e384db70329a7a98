"""Processors for worker tests, imported by worker processes through TIDEMARK_PROCESSOR_MODULES.

`test_gate` holds a batch in its processor until a file appears (or a timeout passes), so a test
can act while the batch is running: kill the worker, take its lease away.
"""

import os
import time

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
