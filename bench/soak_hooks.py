"""Worker-side part of bench_soak.py, imported by every pool process through
TIDEMARK_PROCESSOR_MODULES. Only active with SOAK_HOOKS=1.

- The executor is replaced by a light one (no Spark: the soak measures the control plane's
  lifecycle under faults, not Spark): it writes the batch's items as one JSON file per batch,
  staged then renamed over the batch's previous output (the files sink's replace-per-batch rule).
- With probability SOAK_CRASH_P a process dies after its sink write and before its commit.
- The warm SparkSession is not started (no JVM per pool process; a restarted process is ready at once).
"""

import json
import os
import random
import time
import uuid
from pathlib import Path


def run_light(spec: dict, cancel) -> dict:
    from inventory.services.execution import BatchFailure

    time.sleep(float(os.environ.get("SOAK_WORK_SECONDS", "0.05")))
    if cancel.is_set():
        raise BatchFailure({"type": "LeaseLost", "message": "lease lost before the write"})
    sink = Path(spec["sink"]["path"])
    staging = sink / "_staging"
    staging.mkdir(parents=True, exist_ok=True)
    staged = staging / f"{spec['batch_id']}-{uuid.uuid4().hex}.json"
    staged.write_text(
        json.dumps({"batch": spec["batch_id"], "attempt": spec["attempt"], "items": spec["items"]})
    )
    os.replace(staged, sink / f"batch-{spec['batch_id']}.json")
    return {"rows_out": len(spec["items"])}


def _install() -> None:
    from inventory.services import lifecycle
    from workers import executors, warm_session

    if getattr(lifecycle.batch_succeed, "_soak", False):
        return
    executors.executor_for = lambda name: run_light
    warm_session.start_warming = lambda: None
    crash_p = float(os.environ.get("SOAK_CRASH_P", "0"))
    faults = Path(os.environ["SOAK_FAULT_DIR"])
    real_succeed = lifecycle.batch_succeed

    def batch_succeed(*, batch_id, **kwargs):
        if random.random() < crash_p:
            (faults / f"crash_before_commit-{batch_id}-{os.getpid()}").touch()
            os._exit(137)
        return real_succeed(batch_id=batch_id, **kwargs)

    batch_succeed._soak = True
    lifecycle.batch_succeed = batch_succeed


if os.environ.get("SOAK_HOOKS") == "1":
    _install()
