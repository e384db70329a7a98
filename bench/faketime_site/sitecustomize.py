"""On PYTHONPATH of a soak worker whose wall clock may jump (bench/soak_faults.py, clock_jump).

libfaketime is already loaded in this Python process (and in the pool processes it forks), after
the cnd_timedwait shim beside this file (see cnd_timedwait.c: librdkafka's timed waits):
- dropping LD_PRELOAD keeps it out of every program this process starts, the Spark JVM among them;
- with real monotonic clocks (FAKETIME_DONT_FAKE_MONOTONIC), libfaketime 0.9.10 answers EINVAL to
  the absolute monotonic clock_nanosleep that time.sleep uses: sleep with select() instead (a
  timed wait on no file, which libfaketime leaves alone)."""

import os
import select
import time

os.environ.pop("LD_PRELOAD", None)


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
