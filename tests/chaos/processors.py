"""Fault injection for the chaos suite, loaded in worker processes through
TIDEMARK_PROCESSOR_MODULES (each pool process imports it when it starts).

Processors:
- `chaos_hold`: tags every row with the attempt that produced it (`_attempt`) and holds the batch
  until `params["gate"]` exists, either in the processor (`hold: "processor"`, on the driver) or
  while Spark writes the sink (`hold: "write"`: the rows pass a UDF that waits, so the staging
  write is under way). A `started-<batch>-<attempt>` / `writing-<batch>` file tells the test
  where the batch is.
- `chaos_exit`: the processor ends its own process (`os._exit`), a poison batch.

Hooks, armed by a job's params (each a flag file path; the hook fires once, when the file is
absent, and creates it):
- `crash_before_commit`: the worker process dies after the sink write, before the commit.
- `die_before_heartbeat`: the worker process dies right after the start, before its first beat.
"""

import os
import time
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql import types as T

from workers.spark.processors import ProcessorContext, register


def _current_attempt(batch_id: int) -> int:
    from inventory.models import Batch

    return Batch.objects.values_list("attempt", flat=True).get(pk=batch_id)


def _wait_for(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


@register("chaos_hold")
def hold(df, ctx: ProcessorContext):
    attempt = _current_attempt(ctx.batch_id)  # read at the start: this process's own attempt
    gate = ctx.params.get("gate")
    timeout = float(ctx.params.get("timeout", 60))
    tagged = df.withColumn("_attempt", F.lit(attempt))
    if not gate:
        return tagged
    folder = os.path.dirname(gate)
    Path(folder, f"started-{ctx.batch_id}-{attempt}").write_text(f"{os.getpid()}\n")
    if ctx.params.get("hold", "processor") == "processor":
        _wait_for(gate, timeout)
        return tagged
    marker = os.path.join(folder, f"writing-{ctx.batch_id}")

    def pass_when_open(value):
        import os as _os
        import time as _time

        with open(marker, "a") as out:
            out.write("x")
        deadline = _time.monotonic() + timeout
        while not _os.path.exists(gate) and _time.monotonic() < deadline:
            _time.sleep(0.05)
        return value

    passed = F.udf(pass_when_open, T.LongType())
    return tagged.withColumn("order_id", passed(F.col("order_id")))


@register("chaos_exit")
def exit_process(df, ctx: ProcessorContext):
    os._exit(int(ctx.params.get("code", 9)))


def _armed(batch_id: int, name: str) -> bool:
    """True once per flag file: when the batch's job asks for fault `name` and it has not fired."""
    from inventory.models import Batch

    snapshot = Batch.objects.values_list("config_snapshot", flat=True).get(pk=batch_id) or {}
    flag = (snapshot.get("params") or {}).get(name)
    if not flag or os.path.exists(flag):
        return False
    Path(flag).write_text(f"{os.getpid()}\n")
    return True


def _install_hooks() -> None:
    from inventory.services import lifecycle
    from workers import execution

    if getattr(lifecycle.batch_succeed, "_chaos", False):
        return
    real_succeed = lifecycle.batch_succeed
    real_heartbeat_start = execution.Heartbeat.start

    def batch_succeed(*, batch_id, **kwargs):
        if _armed(batch_id, "crash_before_commit"):
            os._exit(137)  # the sink is written; the metadata commit never happens
        return real_succeed(batch_id=batch_id, **kwargs)

    def heartbeat_start(self):
        if _armed(self.batch_id, "die_before_heartbeat"):
            os._exit(137)  # started (lease taken), never beat
        return real_heartbeat_start(self)

    batch_succeed._chaos = True
    lifecycle.batch_succeed = batch_succeed
    execution.Heartbeat.start = heartbeat_start


if os.environ.get("TIDEMARK_CHAOS_HOOKS") == "1":
    _install_hooks()
