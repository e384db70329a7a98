"""Kafka consumers kept per Python worker process, so a task does not pay a consumer's start
(threads, broker connections, metadata) before its first message.

Spark reuses a Python worker for the tasks of one executor (`spark.python.worker.reuse`, on by
default); this module's pool lives as long as that process. A consumer is keyed by its whole
librdkafka configuration (credentials included, so a task never gets a consumer connected as
someone else), is lent to one task at a time, and comes back unassigned: every task assigns it to
exactly the partition and start offset it reads. No consumer group is joined and nothing is ever
committed (`enable.auto.commit` is off and no code path commits).

A consumer whose task failed or stopped early is closed, never lent again: its position and
prefetched messages are then unknown. Idle consumers are closed after IDLE_SECONDS (at the next
checkout) and all of them when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
import time

from confluent_kafka import Consumer

# a consumer unused for longer is closed rather than lent (its connections may have gone stale)
IDLE_SECONDS = 300.0
# idle consumers kept per configuration (a Python worker runs one task at a time)
MAX_IDLE_PER_KEY = 2

_lock = threading.Lock()
_idle: dict[str, list[tuple[float, Consumer]]] = {}
_opened = 0  # consumers created by this process (tests and the benchmark read it)


def opened() -> int:
    return _opened


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _close_quietly(consumer: Consumer) -> None:
    with contextlib.suppress(Exception):
        consumer.close()


@contextlib.contextmanager
def lend(config: dict):
    """A consumer for `config` (librdkafka settings), reused when one is idle; returned to the
    pool unassigned if the block ends normally, closed if it raised or was abandoned."""
    global _opened
    key = _key(config)
    now = time.monotonic()
    consumer = None
    stale = []
    with _lock:
        idle = _idle.get(key, [])
        while idle:
            since, candidate = idle.pop()
            if now - since <= IDLE_SECONDS:
                consumer = candidate
                break
            stale.append(candidate)
    for old in stale:
        _close_quietly(old)
    if consumer is None:
        consumer = Consumer(config)
        _opened += 1
    ok = False
    try:
        yield consumer
        ok = True
    finally:
        if ok:
            try:
                consumer.unassign()
            except Exception:
                ok = False
        if not ok:
            _close_quietly(consumer)
        else:
            with _lock:
                idle = _idle.setdefault(key, [])
                if len(idle) < MAX_IDLE_PER_KEY:
                    idle.append((time.monotonic(), consumer))
                    consumer = None
            if consumer is not None:
                _close_quietly(consumer)


def close_all() -> None:
    """Close every idle consumer of this process."""
    with _lock:
        consumers = [consumer for idle in _idle.values() for _since, consumer in idle]
        _idle.clear()
    for consumer in consumers:
        _close_quietly(consumer)


atexit.register(close_all)
