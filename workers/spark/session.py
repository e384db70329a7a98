"""One warm SparkSession per process, created on first use and reused by every batch.

Starting a JVM and a SparkContext costs seconds; running a small job on a warm one costs a fraction
of a second. So the first `get_session()` call builds the session and later calls return it.
The first call's master and conf win: a process talks to one cluster for its whole life.
"""

import logging
import os
import sys
import threading
from pathlib import Path

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Small-machine defaults; anything in `conf` overrides them.
DEFAULT_CONF: dict[str, str] = {
    # a batch is small: a handful of shuffle partitions beats the default 200 by a wide margin
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    # timestamps are formatted and compared in UTC unless a job says otherwise
    "spark.sql.session.timeZone": "UTC",
    # Parquet timestamps as microseconds since the epoch (UTC), as Iceberg stores them, rather than
    # the deprecated INT96 (every Parquet reader reads both; the Iceberg sink needs this one)
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.adaptive.enabled": "true",
    # several batches share a worker's session (workers/spark/slots.py): each slot's pool gets a
    # fair share of the executors instead of waiting behind the batch that submitted first
    "spark.scheduler.mode": "FAIR",
    # a corrupt input must fail its batch, never be skipped silently (docs/design.md invariant 9)
    "spark.sql.files.ignoreCorruptFiles": "false",
    "spark.sql.files.ignoreMissingFiles": "false",
}

# The directory holding the `workers` package, so Python workers can import project code.
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])

_lock = threading.Lock()
_session: SparkSession | None = None


def get_session(
    master: str | None = "local[*]", conf: dict | None = None, app_name: str = "tidemark"
) -> SparkSession:
    """Return this process's SparkSession, creating it on the first call.

    master=None leaves the master to spark-submit's --master (used by workers/spark/submit.py).
    """
    global _session
    with _lock:
        if _session is not None and _is_alive(_session):
            current = _session.sparkContext.master
            if master is not None and current != master:
                log.warning(
                    "spark session already running on %s; ignoring requested master %s",
                    current,
                    master,
                )
            return _session
        _prepare_python_environment()
        # py4j logs every connection at INFO, even from __del__ at interpreter exit
        logging.getLogger("py4j").setLevel(logging.WARNING)
        builder = SparkSession.builder.appName(app_name)
        if master is not None:
            builder = builder.master(master)
        for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
            builder = builder.config(key, _conf_value(value))
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("WARN")
        log.info("spark session started on %s", _session.sparkContext.master)
        return _session


def stop_session() -> None:
    """Stop this process's session (worker shutdown). The next get_session() starts a new one."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None


def _is_alive(session: SparkSession) -> bool:
    # a stopped context drops its Java handle; someone may have called spark.stop() directly
    return session.sparkContext._jsc is not None


def _conf_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _prepare_python_environment() -> None:
    """Make Spark's Python workers run this interpreter and find this project.

    The JVM inherits the environment when it starts, so this must happen before the first session.
    Without it, workers run whatever `python3` is on PATH, which may lack psycopg2 or the project.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PROJECT_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([PROJECT_ROOT, *paths])
