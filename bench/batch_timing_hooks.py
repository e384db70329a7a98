"""Worker-side part of bench_batches.py, imported by the worker through TIDEMARK_PROCESSOR_MODULES.
Only active when BENCH_TIMING_FILE is set: then every step of a batch on this worker is timed and
one JSON line per batch is appended to that file.

Steps (seconds, perf_counter): start (the acquire that took the batch: claim or plan, and start),
spec (building the spec), executor (everything on the Spark side), publish (the fence's
transaction around the sink's swap), swap (the renames alone), commit (the commit transaction);
executor_jvm_cpu (CPU seconds the driver's JVM used during the executor step, from /proc: the
JVM's own work, whatever the machine's load does to the wall clock); wall-clock times (time.time) of that acquire and of the end of the commit, which the bench
compares with the moment it made the batch due. (A nudge's next acquire plans the job's next
work: it is the next batch's start, so there is no separate next_plan step any more.)
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


_jvm_pid: dict[int, int] = {}


def jvm_cpu_seconds(spark) -> float:
    """CPU seconds (user + system) the JVM behind `spark` has used so far (Linux /proc)."""
    key = id(spark)
    if key not in _jvm_pid:
        _jvm_pid[key] = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    with open(f"/proc/{_jvm_pid[key]}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _with_jvm_cpu(call):
    """`call` (the warm executor), also recording the JVM's CPU seconds it took."""

    def measured(spec, cancel):
        from workers import warm_session

        spark = warm_session.get_warm_session()
        before = jvm_cpu_seconds(spark)
        try:
            return call(spec, cancel)
        finally:
            _record("executor_jvm_cpu", jvm_cpu_seconds(spark) - before)

    return measured


def _install(path: str) -> None:
    from workers import execution, executors
    from workers.spark import fence, run, sinks

    if getattr(execution, "_bench_timed", False):
        return
    execution._bench_timed = True

    # a nudge (tidemark.run_job) runs its job's batches one after another: each batch's timings
    # start with the acquire that took it and end when its commit returned
    real_acquire = execution.lifecycle.batch_acquire

    def acquire(*args, **kwargs):
        started_wall, started = time.time(), time.perf_counter()
        batch = real_acquire(*args, **kwargs)
        if batch is not None:
            _current.timings = {"task_start_wall": started_wall, "batch": batch.pk}
            _record("start", time.perf_counter() - started)
        return batch

    real_run_started = execution._run_started

    def run_started(*args, **kwargs):
        try:
            return real_run_started(*args, **kwargs)
        finally:
            timings = getattr(_current, "timings", None)
            _current.timings = None
            if timings is not None and "commit" in timings:
                timings["task_end_wall"] = time.time()
                with _lock, open(path, "a") as out:
                    out.write(json.dumps(timings) + "\n")

    execution.lifecycle.batch_acquire = acquire
    execution._run_started = run_started
    execution.batch_spec = _timed("spec", execution.batch_spec)  # the name execution calls
    executors.run_warm = _timed("executor", _with_jvm_cpu(executors.run_warm))
    sinks._swap_in = _timed("swap", sinks._swap_in)

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
