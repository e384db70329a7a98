"""Real Celery worker processes for tests: same test database, a queue of this test session's own.

tests/conftest.py loads this module as a plugin, so every test module can ask for the fixtures
by name and all of them share one worker (do not star-import them: a module that does gets a
worker of its own). Tests that talk to a worker need `@pytest.mark.django_db(transaction=True)`:
the worker only sees committed rows. Helpers (`wait_until`, `write_orders`, `read_sink`) are
imported normally.

- `worker_env`: the environment a worker subprocess needs (DATABASE_URL of the test database,
  REDIS_URL, CELERY_QUEUE, test processors); it also points this process's Celery app at the queue.
- `celery_worker`: one prefork worker (concurrency 1) shared by the whole test session.
- `start_worker`: a factory for extra workers in one test (stopped at the end of the test).
"""

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[2]
CELERY = ROOT / ".venv" / "bin" / "celery"
TEST_PROCESSOR_MODULE = "tests.support.worker_processors"
# the variable naming the tests' sink database in a worker's environment (tests/support/sink_database.py)
WORKER_SINK_ENV = "TM_TEST_WORKER_SINK_DSN"
# The test JVMs (this process's session, every worker's): the client compiler only and the serial
# collector. A test's Spark jobs are many and tiny, on a 2-core machine shared with other runs:
# C2's compiler threads and a parallel collector cost more CPU than they win back there (a cold
# session and 15 small jobs: about half the wall time). Semantics are the JVM's either way;
# deployments keep the JVM's defaults (workers/spark/session.py). TIDEMARK_TEST_JVM_OPTIONS=""
# runs the tests on the JVM's defaults too.
TEST_JVM_OPTIONS = os.environ.get(
    "TIDEMARK_TEST_JVM_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
)


def wait_until(
    predicate,
    *,
    timeout: float,
    interval: float = 0.2,
    message: str = "",
    progress=None,
    limit: float | None = None,
):
    """Poll `predicate` until it returns something truthy.

    Without `progress`, fail the test after `timeout` seconds. With `progress` (a callable whose
    value changes while the awaited work moves: a log growing, CPU time spent, rows changing),
    `timeout` bounds a stall instead: the test fails only when `progress()` stayed the same for
    `timeout` seconds, or after `limit` seconds in all (default 10 x `timeout`), so a busy
    machine makes a wait longer, never a failure, and a hang still ends it."""
    started = time.monotonic()
    deadline = started + timeout
    hard = started + (limit if limit is not None else 10 * timeout)
    last = progress() if progress else None
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if progress is not None:
            current = progress()
            if current != last:
                last, deadline = current, now + timeout
            if now > hard:
                pytest.fail(f"gave up after {limit or 10 * timeout:.0f} s waiting for {message}")
        if now > deadline:
            stalled = "without progress " if progress else ""
            pytest.fail(
                f"timed out after {timeout:.0f} s {stalled}waiting for {message or predicate}"
            )
        time.sleep(interval)


def cpu_seconds(pgid: int) -> float:
    """CPU time spent so far by the processes of a process group (a worker started in a session
    of its own: its main process, pool processes and their JVMs), dead children included."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:  # pgrp; then utime, stime, cutime, cstime
            total += sum(int(x) for x in fields[11:15])
    return total / tick


def database_url() -> str:
    from django.conf import settings

    db = settings.DATABASES["default"]
    auth = quote(db.get("USER") or "", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db.get("HOST") or ""
    if host.startswith("/"):  # a unix socket directory (embedded PostgreSQL), percent-encoded
        return f"postgresql://{auth}@{quote(host, safe='')}/{db['NAME']}"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{db['NAME']}"


class WorkerProcess:
    """One `celery worker` subprocess with its log in a file."""

    def __init__(
        self,
        *,
        env: dict,
        queue: str,
        name: str,
        log_dir: Path,
        concurrency: int = 1,
        pool: str = "prefork",
    ):
        self.env = env
        self.pool = pool
        self.queue = queue
        self.name = f"{name}-{uuid.uuid4().hex[:6]}"
        self.log_path = log_dir / f"{self.name}.log"
        self.concurrency = concurrency
        self.proc: subprocess.Popen | None = None
        self._stopping = False

    def start(self, *, wait_for_spark: bool = True) -> "WorkerProcess":
        log = open(self.log_path, "wb")  # noqa: SIM115 - kept open by the child
        self._stopping = False
        self.proc = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                "controlplane",
                "worker",
                f"--pool={self.pool}",
                f"--concurrency={self.concurrency}",
                "-Q",
                self.queue,
                "-n",
                f"{self.name}@%h",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
                "--loglevel=INFO",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(
            lambda: self._alive() and "ready." in self.log(),
            timeout=60,
            progress=self.progress,
            message=f"worker {self.name} to be ready",
        )
        if wait_for_spark:
            # prefork: a session per child; threads: one for the process
            self.wait_for_spark(sessions=self.concurrency if self.pool == "prefork" else 1)
        return self

    def wait_for_spark(self, *, sessions: int, timeout: float = 90) -> None:
        """Until the worker logged `sessions` warm SparkSessions; `timeout` bounds a stall (no
        CPU spent, nothing logged), not a slow start on a busy machine."""
        wait_until(
            lambda: self._alive() and self.log().count("warm SparkSession ready") >= sessions,
            timeout=timeout,
            progress=self.progress,
            message=f"worker {self.name} to warm its SparkSession",
        )

    def progress(self) -> tuple[int, int]:
        """Changes while the worker works: its log grows, its processes spend CPU (whole seconds,
        so an idle JVM's ticks move it only now and then)."""
        if self.proc is None:
            return (0, 0)
        return (len(self.log()), int(cpu_seconds(self.proc.pid)))

    def _alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            pytest.fail(f"worker {self.name} exited; log:\n{self.log()[-4000:]}")
        return True

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop_begin(self) -> None:
        """Ask for a warm shutdown (children stop their sessions) without waiting for it, so
        several workers stop at once; `stop` then waits."""
        if self.proc is None or self.proc.poll() is not None or self._stopping:
            return
        self._stopping = True
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.stop_begin()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # children of a killed main process must not outlive it
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def celery_queue() -> str:
    return f"tidemark-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def worker_env(django_db_setup, celery_queue) -> dict:
    from django.conf import settings

    from controlplane.celery import app
    from tests.support.sink_database import sink_database_dsn

    # the app reads Django settings under the CELERY_ namespace: set the namespaced key
    app.conf.CELERY_TASK_DEFAULT_QUEUE = celery_queue
    assert app.conf.task_default_queue == celery_queue
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        # the test database under a name a sink may use (Tidemark's own settings never are)
        "TM_TEST_DATABASE_URL": database_url(),
        # table sinks write to a database of their own, never Tidemark's (invariant 10)
        WORKER_SINK_ENV: sink_database_dsn(),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_QUEUE": celery_queue,
        "TIDEMARK_PROCESSOR_MODULES": TEST_PROCESSOR_MODULE,
        "TIDEMARK_DEV": "1",
        "TIDEMARK_DATA_DIR": str(settings.DATA_DIR),
        "SPARK_MASTER": os.environ.get("TEST_SPARK_MASTER", "local[2]"),
        "SPARK_CONF": ",".join(
            ["spark.sql.shuffle.partitions=2", f"spark.driver.extraJavaOptions={TEST_JVM_OPTIONS}"]
        ),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture(scope="session")
def worker_log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("celery-workers")


@pytest.fixture(scope="session")
def celery_worker(worker_env, celery_queue, worker_log_dir):
    worker = WorkerProcess(
        env=worker_env, queue=celery_queue, name="shared", log_dir=worker_log_dir
    ).start()
    yield worker
    worker.stop()


@pytest.fixture
def private_queue(worker_env):
    """A Celery queue of this test's own: what this process sends goes there, and only workers
    started on it (with their own environment) take it."""
    from controlplane.celery import app

    queue = f"tidemark-private-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    previous = app.conf.CELERY_TASK_DEFAULT_QUEUE
    app.conf.CELERY_TASK_DEFAULT_QUEUE = queue
    yield queue
    app.conf.CELERY_TASK_DEFAULT_QUEUE = previous


@pytest.fixture
def start_worker(worker_env, celery_queue, worker_log_dir):
    started = []

    def start(*, name: str = "extra", env: dict | None = None, **options) -> WorkerProcess:
        worker = WorkerProcess(
            env={**worker_env, **(env or {})},
            queue=celery_queue,
            name=name,
            log_dir=worker_log_dir,
        )
        started.append(worker)
        return worker.start(**options)

    yield start
    for worker in started:
        worker.stop_begin()  # all of them at once
    for worker in started:
        worker.stop()


# ---- data helpers ------------------------------------------------------------------------------


def write_orders(path: Path, *, first_id: int, count: int, day: int = 1, hour: int = 0) -> Path:
    """A Parquet file of `count` order events with ids first_id.. (order_id is unique per row)."""
    from datetime import UTC, datetime, timedelta

    import pyarrow as pa
    import pyarrow.parquet as pq

    start = datetime(2026, 1, day, hour, tzinfo=UTC)
    ids = list(range(first_id, first_id + count))
    table = pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([i % 7 for i in ids], pa.int64()),
            "amount": pa.array([float(i % 50) + 0.5 for i in ids], pa.float64()),
            "event_time": pa.array(
                [start + timedelta(minutes=n) for n in range(count)], pa.timestamp("us", "UTC")
            ),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def read_sink(path: Path) -> list[dict]:
    """Every row of a file sink (all batches' directories), as dicts."""
    import pyarrow.dataset as ds

    if not path.exists():
        return []
    return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist()
