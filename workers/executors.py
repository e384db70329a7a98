"""Executors: how a batch spec reaches Spark. Both run the same Spark code and report the same way.

- "warm": this worker process's SparkSession (workers/warm_session.py) runs the batch in-process,
  on the Celery thread that took it, beside the process's other batches (workers/spark/slots.py:
  at most TIDEMARK_BATCHES_PER_WORKER at once, a FAIR pool and a job tag each).
- "submit": each batch gets its own driver: the spec goes to a temporary JSON file, pyspark's
  bundled spark-submit runs `workers.spark.submit` on it, and the result comes back as JSON.

An executor is `executor(spec, cancel) -> result`; it raises execution.BatchFailure with the error to
store. `cancel` is set when the batch's lease is lost: the Spark work is then stopped early.
"""

import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

from django.conf import settings

from inventory.services.job_config import EXECUTORS
from workers import warm_session
from workers.execution import BatchFailure, Executor


def executor_for(name: str) -> Executor:
    if name == "warm":
        return run_warm
    if name == "submit":
        return run_submit
    raise BatchFailure(
        {
            "type": "InvalidExecutor",
            "message": f"executor: unknown executor {name!r}; use one of {', '.join(EXECUTORS)}",
            "detail": "",
        }
    )


def run_warm(spec: dict, cancel: threading.Event) -> dict:
    """The batch on this process's warm session, beside the other batches the process runs."""
    from workers.spark.errors import BatchError
    from workers.spark.slots import run_batch_in_slot

    spark = warm_session.get_warm_session()
    try:
        return run_batch_in_slot(
            spark,
            spec,
            slots=warm_session.batch_slots(),
            cancel=cancel,
            # the threads pool enforces no Celery time limit: the slot cancels the batch's jobs
            time_limit=settings.TIDEMARK_BATCH_TIME_LIMIT,
        )
    except BatchError as exc:
        raise BatchFailure(_error_of(exc)) from exc


def _error_of(exc) -> dict:
    error = getattr(exc, "error", None)
    if isinstance(error, dict):
        return error
    return {key: value for key, value in exc.as_dict().items() if value not in (None, "")}


def run_submit(spec: dict, cancel: threading.Event) -> dict:
    from workers.spark.errors import BatchError
    from workers.spark.submit import read_result, submit_command

    limit = settings.TIDEMARK_BATCH_TIME_LIMIT
    master, conf = settings.SPARK_MASTER, settings.SPARK_CONF
    with tempfile.TemporaryDirectory(prefix=f"tidemark-batch-{spec['batch_id']}-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        result_path = Path(tmp) / "result.json"
        log_path = Path(tmp) / "spark-submit.log"
        spec_path.write_text(json.dumps({**spec, "spark": {"master": master, "conf": conf}}))
        env = {**os.environ, "PYTHONPATH": _pythonpath()}
        if settings.TIDEMARK_PROCESSOR_MODULES:
            env["TIDEMARK_PROCESSOR_MODULES"] = ",".join(settings.TIDEMARK_PROCESSOR_MODULES)
        argv = submit_command(str(spec_path), str(result_path), master, conf)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                _wait(proc, cancel, limit)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        try:
            return read_result(result_path, proc.returncode, log_path)
        except BatchError as exc:
            raise BatchFailure(_error_of(exc)) from exc


def _wait(proc: subprocess.Popen, cancel: threading.Event, limit: float) -> None:
    waited = 0.0
    while proc.poll() is None:
        if cancel.wait(0.2):
            raise BatchFailure({"type": "LeaseLost", "message": "lease lost; spark-submit killed"})
        waited += 0.2
        if waited > limit:
            raise BatchFailure(
                {"type": "TimeLimitExceeded", "message": f"spark-submit ran longer than {limit} s"}
            )


def _pythonpath() -> str:
    root = str(settings.BASE_DIR)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return os.pathsep.join([root, *paths])
