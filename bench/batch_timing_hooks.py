"""Worker-side part of bench_batches.py, imported by the worker through TIDEMARK_PROCESSOR_MODULES.
Only active when BENCH_TIMING_FILE is set: then every step of a batch on this worker is timed and
one JSON line per batch is appended to that file.

Steps (seconds, perf_counter): start (the start transaction), spec (building the spec), executor
(everything on the Spark side), publish (the fence's transaction around the sink's swap), swap
(the renames alone), commit (the commit transaction), next_plan (planning the job's next work);
wall-clock times (time.time) of the task's start and of the end of the commit, which the bench
compares with the moment it made the batch due.
"""

import json
import os
import threading
import time
from contextlib import contextmanager

_current = threading.local()
_lock = threading.Lock()


def _record(step: str, seconds: float) -> None:
    timings = getattr(_current, "timings", None)
    if timings is not None:
        timings[step] = timings.get(step, 0.0) + seconds


def _timed(step: str, call):
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            _record(step, time.perf_counter() - started)

    return timed


def _install(path: str) -> None:
    from celery import signals

    from inventory.services import execution
    from workers import executors
    from workers.spark import fence, run, sinks

    if getattr(execution, "_bench_timed", False):
        return
    execution._bench_timed = True

    def on_prerun(task_id=None, task=None, args=None, **_kwargs):
        if task is not None and task.name == "tidemark.run_batch":
            _current.timings = {"task_start_wall": time.time(), "batch": args[0] if args else None}

    def on_postrun(task_id=None, task=None, **_kwargs):
        timings = getattr(_current, "timings", None)
        if task is None or task.name != "tidemark.run_batch" or timings is None:
            return
        _current.timings = None
        if "commit" not in timings:
            return  # a task that found nothing to run
        timings["task_end_wall"] = time.time()
        with _lock, open(path, "a") as out:
            out.write(json.dumps(timings) + "\n")

    signals.task_prerun.connect(on_prerun, weak=False)
    signals.task_postrun.connect(on_postrun, weak=False)

    execution._start_if_ours = _timed("start", execution._start_if_ours)
    execution.batch_spec = _timed("spec", execution.batch_spec)
    executors.run_warm = _timed("executor", executors.run_warm)
    sinks._swap_in = _timed("swap", sinks._swap_in)
    execution._continue = _timed("next_plan", execution._continue)

    real_commit = execution._commit

    def commit(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real_commit(*args, **kwargs)
        finally:
            _record("commit", time.perf_counter() - started)
            timings = getattr(_current, "timings", None)
            if timings is not None:
                timings["commit_end_wall"] = time.time()

    execution._commit = commit

    real_publish_from_spec = fence.publish_from_spec

    def publish_from_spec(spec):
        publish = real_publish_from_spec(spec)

        @contextmanager
        def timed_publish():
            started = time.perf_counter()
            try:
                with publish() as replaced:
                    yield replaced
            finally:
                _record("publish", time.perf_counter() - started)

        return timed_publish

    run.publish_from_spec = publish_from_spec


if os.environ.get("BENCH_TIMING_FILE"):
    _install(os.environ["BENCH_TIMING_FILE"])
