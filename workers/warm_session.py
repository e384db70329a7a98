"""The warm SparkSession of a worker process: started when the process starts, reused by every
batch it runs, stopped at shutdown (connected to Celery's worker signals by `install`).

The default pool is `threads` (settings: CELERY_WORKER_POOL, CELERY_WORKER_CONCURRENCY =
TIDEMARK_BATCHES_PER_WORKER): one process, one JVM, one session, and a Celery thread per batch;
the batches share the session through `batch_slots()` (workers/spark/slots.py). The session is
started at `worker_init` in that case.

Celery's prefork pool (still usable: `--pool=prefork`, one session per child) forks its children
from the main process; the JVM must start in each child (a JVM does not survive a fork), so the
session is built at `worker_process_init`, never in the parent. Building it takes longer than the
pool waits for a child to report in, so it starts on a thread and the first batch waits for it
(`get_warm_session`).
"""

import logging
import os
import threading

from celery import signals
from django.conf import settings

log = logging.getLogger(__name__)

_ready = threading.Event()
_warming: threading.Thread | None = None
_error: BaseException | None = None
_installed = False
_slots = None
_slots_lock = threading.Lock()


def batch_slots():
    """This process's slots for batches on the warm session (TIDEMARK_BATCHES_PER_WORKER)."""
    global _slots
    with _slots_lock:
        if _slots is None:
            from workers.spark.slots import BatchSlots

            _slots = BatchSlots(settings.TIDEMARK_BATCHES_PER_WORKER)
        return _slots


def _warm() -> None:
    global _error
    try:
        from workers.spark.session import get_session

        session = get_session(master=settings.SPARK_MASTER, conf=settings.SPARK_CONF)
        log.info("warm SparkSession ready on %s (pid %s)", session.sparkContext.master, os.getpid())
    except BaseException as exc:  # reported to the first batch that needs the session
        _error = exc
        log.exception("could not start the warm SparkSession")
    finally:
        _ready.set()


def start_warming() -> None:
    global _warming, _error
    if _warming is not None and _warming.is_alive():
        return
    _ready.clear()
    _error = None
    _warming = threading.Thread(target=_warm, name="spark-warmup", daemon=True)
    _warming.start()


def get_warm_session():
    """This process's SparkSession: the warm one, or a new one if warming failed or never ran."""
    from workers.spark.session import get_session

    if _warming is not None:
        _ready.wait()
    return get_session(master=settings.SPARK_MASTER, conf=settings.SPARK_CONF)


def _on_process_init(**_kwargs) -> None:
    from inventory.services.job_config import processors_load

    processors_load()
    start_warming()


def _on_worker_init(sender=None, **_kwargs) -> None:
    # the threads pool runs batches in this (main) process, which forks nothing: warm it now
    pool = getattr(sender, "pool_cls", None)
    name = pool if isinstance(pool, str) else getattr(pool, "__module__", "")
    if "thread" in str(name).lower():
        _on_process_init()


def _on_process_shutdown(**_kwargs) -> None:
    from workers.spark.session import stop_session

    try:
        stop_session()
    except Exception:
        log.exception("stopping the SparkSession failed")


def install() -> None:
    """Connect the hooks (idempotent; called when the tasks module is imported)."""
    global _installed
    if _installed:
        return
    signals.worker_init.connect(_on_worker_init, weak=False)
    signals.worker_process_init.connect(_on_process_init, weak=False)
    signals.worker_process_shutdown.connect(_on_process_shutdown, weak=False)
    # the solo and threads pools run batches in the main process
    signals.worker_shutdown.connect(_on_process_shutdown, weak=False)
    _installed = True
