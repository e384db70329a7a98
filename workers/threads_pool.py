"""Celery's threads pool, woken up when a task finishes.

A worker runs its batches on Celery's `threads` pool (`--pool=threads`), so they share one warm
SparkSession. With `acks_late` and a prefetch of one message per thread, the worker stops asking
Redis for messages while every thread holds one, and asks again on its event loop's next turn
after a task is acknowledged. A pool thread acknowledges; nothing wakes the event loop, which
sleeps until its next timer: up to 10 s (5 s observed) before a waiting task is even received.

This worker step gives the event loop a pipe to listen on, and the pool a write to it once a task
is done (after its acknowledgement), so the loop turns at once and fetches the next message.
Only the threads pool needs it (prefork children report through pipes the loop already reads).
"""

import logging
import os

from celery import bootsteps
from celery.concurrency.thread import TaskPool as ThreadsTaskPool

log = logging.getLogger(__name__)


class WakeLoopWhenTaskDone(bootsteps.StartStopStep):
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self._pipe = None

    def register_with_event_loop(self, worker, hub):
        pool = worker.pool
        if not isinstance(pool, ThreadsTaskPool) or self._pipe is not None:
            return
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        self._pipe = (read_end, write_end)

        def drain(*_args):
            try:
                while os.read(read_end, 4096):
                    pass
            except BlockingIOError:
                pass

        def wake(_future):
            try:
                os.write(write_end, b"\0")
            except (BlockingIOError, OSError):
                pass  # a full pipe wakes the loop anyway; a closed one: shutting down

        apply = pool.on_apply

        def apply_and_wake(*args, **kwargs):
            result = apply(*args, **kwargs)
            result.f.add_done_callback(wake)
            return result

        pool.on_apply = apply_and_wake
        hub.add_reader(read_end, drain)

    def stop(self, worker):
        if self._pipe is not None:
            for fd in self._pipe:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._pipe = None


def install(app) -> None:
    """Add the step to `app`'s worker blueprint (before the worker builds it; idempotent)."""
    if WakeLoopWhenTaskDone not in app.steps["worker"]:
        app.steps["worker"].add(WakeLoopWhenTaskDone)
