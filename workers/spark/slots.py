"""Several batches at once in one warm SparkSession, each in a slot of its own.

A worker process runs its batches on threads that share the process's SparkSession:

- at most `limit` batches do Spark work at once (the rest wait for a slot, their leases kept alive
  by their heartbeats);
- each slot submits to a FAIR scheduler pool of its own (`tidemark-<n>`; the session runs with
  `spark.scheduler.mode=FAIR`), so a large batch does not hold a small one's tasks back: Spark
  shares its executors between the pools. The pool is a property of the thread (Spark's local
  property, kept by the thread's JVM twin): it is set when the thread's batch gets another slot
  than its last one, not set and cleared around every batch (each is a round trip to the JVM,
  and a worker thread runs Spark work only in a slot);
- every Spark job of a batch carries the batch's tag (`tidemark-batch-<id>-a<attempt>`, a
  thread-local property that Spark SQL passes on to the jobs it starts), so a lost lease or the
  time limit cancels that batch's jobs and no other batch's.

No Django here: the executor (workers/executors.py) passes the limit and the cancel event in.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from workers.spark.errors import BatchError
from workers.spark.run import run_batch

_POOL = "spark.scheduler.pool"
# the pool this thread last set (per thread, as Spark's local properties are)
_thread = threading.local()


class BatchSlots:
    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError("a worker runs at least one batch at a time")
        self.limit = limit
        self._free = list(range(limit - 1, -1, -1))
        self._lock = threading.Lock()
        self._available = threading.Semaphore(limit)

    def running(self) -> int:
        with self._lock:
            return self.limit - len(self._free)

    @contextmanager
    def slot(self, spark: SparkSession, *, tag: str, cancel: threading.Event) -> Iterator[str]:
        """Hold a slot while the body runs Spark work on this thread under `tag`; yields the
        FAIR pool's name. Waiting for a slot ends early when `cancel` is set."""
        while not self._available.acquire(timeout=0.2):
            if cancel.is_set():
                raise BatchError(
                    "LeaseLost", "lease lost while waiting for a Spark slot", "", "run"
                )
        with self._lock:
            number = self._free.pop()
        sc = spark.sparkContext
        pool = f"tidemark-{number}"
        try:
            if getattr(_thread, "pool", None) != (id(sc), pool):
                _thread.pool = None  # unknown until the call returned
                sc.setLocalProperty(_POOL, pool)
                _thread.pool = (id(sc), pool)
            sc.addJobTag(tag)
            yield pool
        finally:
            try:
                sc.removeJobTag(tag)
            finally:
                with self._lock:
                    self._free.append(number)
                self._available.release()


def batch_tag(spec: dict) -> str:
    return f"tidemark-batch-{int(spec['batch_id'])}-a{int(spec.get('attempt') or 0)}"


def run_batch_in_slot(
    spark: SparkSession,
    spec: dict,
    *,
    slots: BatchSlots,
    cancel: threading.Event,
    time_limit: float | None = None,
) -> dict:
    """run_batch in a slot of `slots`. When `cancel` is set (the lease is lost) or `time_limit`
    seconds pass, this batch's Spark jobs are cancelled and BatchError LeaseLost or
    TimeLimitExceeded is raised; other batches of the session run on."""
    tag = batch_tag(spec)
    stopped: list[str] = []
    done = threading.Event()

    def watch() -> None:
        deadline = None if time_limit is None else time.monotonic() + time_limit
        # wakes at once when the batch ends (the batch's thread joins this one)
        while not done.wait(0.1):
            if cancel.is_set():
                stopped.append("LeaseLost")
            elif deadline is not None and time.monotonic() > deadline:
                stopped.append("TimeLimitExceeded")
            else:
                continue
            # keeps cancelling until the batch's thread notices: a job may start just after one
            while not done.is_set():
                spark.sparkContext.cancelJobsWithTag(tag)
                done.wait(0.5)
            return

    with slots.slot(spark, tag=tag, cancel=cancel):
        watcher = threading.Thread(target=watch, name=f"spark-watch-{tag}", daemon=True)
        watcher.start()
        try:
            if cancel.is_set():
                raise BatchError("LeaseLost", "lease lost before the batch started", "", "run")
            return run_batch(spark, spec)
        except BatchError as exc:
            if stopped:
                raise _stopped_error(stopped[0], time_limit) from exc
            raise
        finally:
            done.set()
            watcher.join(timeout=5)


def _stopped_error(reason: str, time_limit: float | None) -> BatchError:
    if reason == "TimeLimitExceeded":
        message = f"the batch ran longer than {time_limit:g} s; its Spark jobs were cancelled"
    else:
        message = "lease lost; the batch's Spark jobs were cancelled"
    return BatchError(reason, message, "", "run")
