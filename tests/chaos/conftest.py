"""The chaos suite's workers, data and checks.

Every scenario runs its own Celery workers on a queue of its own (so killing or stopping them
touches no other test), with the fault hooks of tests/chaos/processors.py armed. A test drives the
periodic steps itself (`drive`: reaper, retry requeue, backfill pacing, a job run), so leases of a
few seconds are enough and no scenario waits for beat. Each scenario ends with `assert_exactly_once`:
the sink holds every source row once, and nothing else.
"""

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import tests.chaos.processors  # noqa: F401 - registers the chaos processors in this process too
import tests.support.worker_processors  # noqa: F401
from tests.support.worker_fixtures import WorkerProcess, read_sink, wait_until, write_orders

CHAOS_MODULES = "tests.support.worker_processors,tests.chaos.processors"

# the workers of the running scenario: what they do is the progress its waits watch
_STARTED: list[WorkerProcess] = []


def pytest_collection_modifyitems(items):
    """A scenario's waits end on facts, so on a busy machine it takes longer rather than failing:
    its bound is a hang's (each wait's stall bound), not pytest's default per-test time."""
    for item in items:
        if item.get_closest_marker("chaos") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(1800))


# ---- a CPU hog beside the whole suite (CHAOS_CPU_HOG=N busy processes; .ci/run sets 2) ----------


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hogs_of_this_process(count: int) -> int:
    """This process's share of CHAOS_CPU_HOG: all of them, or under pytest-xdist (`make chaos`
    runs the scenarios in several processes) one in every `PYTEST_XDIST_WORKER_COUNT`, so the
    machine carries N hogs whatever the number of processes."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return len(range(index, count, workers))


# the hogs' summaries, printed after the run (a session fixture's teardown output is captured)
_HOG_SUMMARIES: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a process's hog summary (see `cpu_hog`)."""
    summary = getattr(node, "workeroutput", {}).get("cpu_hog")
    if summary:
        _HOG_SUMMARIES.append(f"[{node.gateway.id}] {summary}")


def pytest_terminal_summary(terminalreporter):
    for summary in _HOG_SUMMARIES:
        terminalreporter.write_line(summary)


@pytest.fixture(scope="session", autouse=True)
def cpu_hog(request):
    """N processes spinning on the CPU for the whole session, at the suite's own priority, so
    the scenarios prove they wait on facts rather than on a quiet machine. At the end the hog's
    CPU time and the load average are printed, and the run fails if the hog did not really burn
    CPU while the scenarios ran (at least 5% of a core each, on average: at load 38 on 2 cores
    each still got 17%)."""
    count = _hogs_of_this_process(int(os.environ.get("CHAOS_CPU_HOG", "0") or 0))
    if count <= 0:
        yield []
        return
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]
    started, load_start = time.monotonic(), os.getloadavg()[0]
    try:
        yield hogs
    finally:
        wall = time.monotonic() - started
        burnt = [_cpu_seconds(h.pid) for h in hogs if h.poll() is None]
        load_end = os.getloadavg()[0]
        for hog in hogs:
            hog.kill()
            hog.wait()
        summary = (
            f"CPU hog: {count} busy processes for {wall:.0f} s burnt "
            f"{', '.join(f'{b:.0f}' for b in burnt)} CPU s; load average {load_start:.1f} at the "
            f"start, {load_end:.1f} at the end"
        )
        if hasattr(request.config, "workeroutput"):
            request.config.workeroutput["cpu_hog"] = summary  # pytest-xdist: for its controller
        else:
            _HOG_SUMMARIES.append(summary)
        assert len(burnt) == count, f"a hog process died early: {summary}"
        assert all(b >= 0.05 * wall for b in burnt), f"the hog did not burn CPU: {summary}"


def progress():
    """Changes while the scenario moves: its workers log or spend CPU, attempts start or end."""
    from inventory.models import BatchAttempt

    attempts = BatchAttempt.objects.values_list("outcome", flat=True)
    return (
        tuple(w.progress() for w in _STARTED if w.proc is not None),
        len(attempts),
        sum(1 for outcome in attempts if outcome),
    )


def chaos_wait(predicate, *, timeout: float, message: str = "", interval: float = 0.2):
    """wait_until on a fact; `timeout` bounds a stall of the scenario, not a slow machine."""
    return wait_until(
        predicate, timeout=timeout, interval=interval, message=message, progress=progress
    )


@pytest.fixture
def chaos_queue(private_queue):
    return private_queue


@pytest.fixture
def chaos_worker(worker_env, chaos_queue, worker_log_dir):
    """Factory: start a worker on this test's queue (stopped, even if stopped by a signal, at the
    end of the test)."""
    started: list[WorkerProcess] = []

    def start(*, name: str = "chaos", env: dict | None = None, **options) -> WorkerProcess:
        worker = WorkerProcess(
            env={
                **worker_env,
                "CELERY_QUEUE": chaos_queue,
                "TIDEMARK_PROCESSOR_MODULES": CHAOS_MODULES,
                "TIDEMARK_CHAOS_HOOKS": "1",
                **(env or {}),
            },
            queue=chaos_queue,
            name=name,
            log_dir=worker_log_dir,
            concurrency=options.pop("concurrency", 1),
        )
        started.append(worker)
        _STARTED.append(worker)
        return worker.start(**options)

    yield start
    _STARTED.clear()
    for worker in started:
        if worker.proc is not None and worker.proc.poll() is None:
            try:
                os.killpg(worker.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        worker.stop_begin()  # all of them at once: each warm shutdown stops its JVMs
    for worker in started:
        worker.stop()


# ---- data ---------------------------------------------------------------------------------------


def landing_files(landing: Path, *, files: int, rows: int) -> set[int]:
    """`files` Parquet files of `rows` orders each (one asset, so one batch, per file); returns
    the order ids written."""
    ids: set[int] = set()
    for n in range(files):
        first = 1 + n * 1000
        write_orders(landing / f"part-{n:03d}.parquet", first_id=first, count=rows)
        ids.update(range(first, first + rows))
    return ids


def chaos_job(tmp_path: Path, name: str, *, files: int = 1, rows: int = 5, params=None, **options):
    """A files connector over fresh landing files, and a job writing a files sink, one batch per
    file. Returns (job, expected order ids, sink path, gate folder)."""
    from inventory.services.connectors import connector_create
    from inventory.sources.files import directory_discover
    from tests.support.factories import make_job

    landing, sink, gates = tmp_path / "landing", tmp_path / "sink", tmp_path / "gates"
    gates.mkdir(parents=True, exist_ok=True)
    expected = landing_files(landing, files=files, rows=rows)
    connector = connector_create(name=f"{name}-src", kind="files", config={"path": str(landing)})
    directory_discover(connector=connector)
    options.setdefault("processor", "chaos_hold")
    options.setdefault("lease_seconds", 3)
    options.setdefault("retry_backoff_seconds", 0)
    options.setdefault("max_attempts", 5)
    job = make_job(
        connector=connector,
        name=name,
        batch_weight=10**12,
        max_items=1,
        params=params or {},
        sink={"kind": "files", "path": str(sink)},
        **options,
    )
    return job, expected, sink, gates


def worker_pid(batch) -> int:
    """The pid of the pool process running `batch` (its `worker` is host:pid)."""
    return int(batch.worker.rsplit(":", 1)[1])


# ---- driving the periodic steps ------------------------------------------------------------------


def drive(until, *, timeout: float, jobs=(), every: float = 0.5, message: str = ""):
    """Run the beat steps (reaper + due retries, backfill pacing, and a run of each job in `jobs`)
    every `every` seconds until `until()` is truthy."""
    from inventory.services import dispatch, scheduling

    def step():
        scheduling.leases_reap()
        dispatch.backfills_pace()
        for job in jobs:
            dispatch.job_run(job=job)
        value = until()
        if not value:
            time.sleep(every)
        return value

    return chaos_wait(step, timeout=timeout, interval=0, message=message)


def all_batches_done(job) -> bool:
    from inventory.models import Batch, BatchStatus

    open_ = Batch.objects.filter(job=job).exclude(status=BatchStatus.SUCCEEDED)
    return Batch.objects.filter(job=job).exists() and not open_.exists()


# ---- checks --------------------------------------------------------------------------------------


def assert_exactly_once(sink: Path, expected: set[int], *, key: str = "order_id") -> list[dict]:
    """Total-queue check on the sink: no expected row lost, none unexpected, none twice."""
    rows = read_sink(sink)
    seen = Counter(row[key] for row in rows)
    lost = sorted(expected - set(seen))
    unexpected = sorted(set(seen) - expected)
    duplicated = sorted(k for k, n in seen.items() if n > 1)
    assert (lost, unexpected, duplicated) == ([], [], []), (
        f"lost {lost[:20]}, unexpected {unexpected[:20]}, duplicated {duplicated[:20]}"
    )
    return rows


def assert_watermark_covers(job) -> None:
    """The succeeded batches tile [start, watermark) with no gap and no overlap, and the
    watermark stands at the end of the last one."""
    from inventory.models import Batch, BatchStatus, Watermark

    spans = sorted(
        (b.span.lower, b.span.upper)
        for b in Batch.objects.filter(job=job, backfill__isnull=True, status=BatchStatus.SUCCEEDED)
    )
    assert spans, "no batch succeeded"
    for (_, hi), (lo, _) in zip(spans, spans[1:], strict=False):
        assert hi == lo, f"gap or overlap between batches: {spans}"
    assert Watermark.objects.get(job=job).position == spans[-1][1]
