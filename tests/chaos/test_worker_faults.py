"""Workers that die, freeze or get a message twice: every row reaches the sink exactly once.

Each scenario's worker runs its batches on a warm SparkSession; a lease is 3 s, so a lost worker's
batch is reaped within seconds and run again by a (re)started pool process.
"""

import os
import re
import signal
import time

import pytest

from inventory.models import Batch, BatchAttempt, BatchStatus, WatermarkEvent
from inventory.services import dispatch
from tests.chaos.conftest import (
    all_batches_done,
    assert_exactly_once,
    assert_watermark_covers,
    chaos_job,
    chaos_wait,
    drive,
    worker_pid,
)
from tests.support.worker_fixtures import read_sink

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


def _attempts(batch_id: int) -> list[tuple[int, str, str]]:
    return [
        (a.number, a.outcome, (a.error or {}).get("type", ""))
        for a in BatchAttempt.objects.filter(batch_id=batch_id).order_by("number")
    ]


def _succeeded(batch_id: int) -> bool:
    return Batch.objects.get(pk=batch_id).status == BatchStatus.SUCCEEDED


def _gone(pid: int) -> bool:
    """The process ended (or is a zombie waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _assert_published_by_final_attempt(rows: list[dict], batch_id: int) -> None:
    final = Batch.objects.get(pk=batch_id).attempt
    assert {row["_attempt"] for row in rows} == {final}, "the sink holds a stale attempt's output"


def test_a_worker_killed_during_the_sink_write(tmp_path, chaos_worker):
    worker = chaos_worker(name="kill-in-write")
    gate = tmp_path / "gates" / "open"
    job, expected, sink, gates = chaos_job(
        tmp_path, "kill-in-write", rows=20, params={"gate": str(gate), "hold": "write"}
    )
    (batch_id,) = dispatch.job_run(job=job).planned
    chaos_wait(lambda: (gates / f"writing-{batch_id}").exists(), timeout=90, message="the write")

    # the fault lands mid-write: attempt 1's Spark write has its staging directory, nothing is
    # published yet, and the process it kills is the one running the batch
    assert list(sink.glob(f"_staging/batch_id={batch_id}-a1-*"))
    assert read_sink(sink) == []
    pid = worker_pid(Batch.objects.get(pk=batch_id))
    os.kill(pid, signal.SIGKILL)
    chaos_wait(lambda: _gone(pid), timeout=30, message="the killed process to be gone")
    assert Batch.objects.get(pk=batch_id).status == BatchStatus.RUNNING  # nothing committed
    gate.touch()
    drive(lambda: _succeeded(batch_id), timeout=120, message="a later attempt to succeed")

    assert _attempts(batch_id)[0] == (1, "failed", "LeaseExpired")
    assert not list(sink.glob(f"_staging/batch_id={batch_id}-a1-*"))  # cleaned by attempt 2
    rows = assert_exactly_once(sink, expected)
    _assert_published_by_final_attempt(rows, batch_id)
    assert_watermark_covers(job)
    assert "ready." in worker.log()


def test_a_crash_after_the_sink_write_and_before_the_commit(tmp_path, chaos_worker):
    chaos_worker(name="crash-before-commit")
    job, expected, sink, gates = chaos_job(
        tmp_path,
        "crash-before-commit",
        rows=10,
        params={"crash_before_commit": str(tmp_path / "gates" / "crashed")},
    )
    (batch_id,) = dispatch.job_run(job=job).planned
    chaos_wait(lambda: (gates / "crashed").exists(), timeout=90, message="the crash")
    # the crash landed between the write and the commit: the process is gone, attempt 1's output
    # is published in the sink, and the batch is still running: nothing committed
    crashed = int((gates / "crashed").read_text())
    chaos_wait(lambda: _gone(crashed), timeout=30, message="the crashed process to be gone")
    assert {row["_attempt"] for row in read_sink(sink)} == {1}
    assert {row["order_id"] for row in read_sink(sink)} == expected
    assert Batch.objects.get(pk=batch_id).status == BatchStatus.RUNNING
    assert not WatermarkEvent.objects.filter(watermark__job=job).exists()

    drive(lambda: _succeeded(batch_id), timeout=120, message="a later attempt to succeed")

    assert _attempts(batch_id) == [(1, "failed", "LeaseExpired"), (2, "succeeded", "")]
    rows = assert_exactly_once(sink, expected)
    _assert_published_by_final_attempt(rows, batch_id)
    assert WatermarkEvent.objects.filter(watermark__job=job).count() == 1
    assert_watermark_covers(job)


def test_a_death_before_the_first_heartbeat(tmp_path, chaos_worker):
    chaos_worker(name="no-heartbeat")
    job, expected, sink, gates = chaos_job(
        tmp_path,
        "no-heartbeat",
        params={"die_before_heartbeat": str(tmp_path / "gates" / "died")},
    )
    (batch_id,) = dispatch.job_run(job=job).planned
    chaos_wait(lambda: (gates / "died").exists(), timeout=90, message="the death")
    died = int((gates / "died").read_text())
    chaos_wait(lambda: _gone(died), timeout=30, message="the dead process to be gone")
    batch = Batch.objects.get(pk=batch_id)
    assert (batch.status, batch.attempt) == (BatchStatus.RUNNING, 1)
    assert batch.worker.endswith(f":{died}")  # the process that died held the lease

    drive(lambda: _succeeded(batch_id), timeout=120, message="attempt 2 to succeed")

    assert _attempts(batch_id) == [(1, "failed", "LeaseExpired"), (2, "succeeded", "")]
    assert_exactly_once(sink, expected)
    assert_watermark_covers(job)


def _parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_a_zombie_worker_can_neither_commit_nor_publish(tmp_path, chaos_worker):
    # both start at once (their JVMs warm side by side), then both must be warm
    workers = [chaos_worker(name=f"zombie-{n}", wait_for_spark=False) for n in "ab"]
    for worker in workers:
        worker.wait_for_spark(sessions=1)
    gate = tmp_path / "gates" / "open"
    job, expected, sink, gates = chaos_job(tmp_path, "zombie", rows=10, params={"gate": str(gate)})
    (batch_id,) = dispatch.job_run(job=job).planned
    chaos_wait(lambda: (gates / f"started-{batch_id}-1").exists(), timeout=90, message="start")
    pid = worker_pid(Batch.objects.get(pk=batch_id))
    zombie = next(w for w in workers if _parent_pid(pid) == w.proc.pid)

    os.killpg(zombie.proc.pid, signal.SIGSTOP)  # the whole worker freezes, past its lease
    try:
        chaos_wait(lambda: _state(pid) == "T", timeout=30, message="the worker to be stopped")
        drive(
            lambda: (gates / f"started-{batch_id}-2").exists(),
            timeout=120,
            message="attempt 2 on the other worker",
        )
        gate.touch()
        chaos_wait(lambda: _succeeded(batch_id), timeout=60, message="attempt 2 to commit")
    finally:
        os.killpg(zombie.proc.pid, signal.SIGCONT)
    chaos_wait(
        lambda: f"batch {batch_id} attempt 1: stale" in zombie.log(),
        timeout=60,
        message="the zombie to give up",
    )

    batch = Batch.objects.get(pk=batch_id)
    assert (batch.status, batch.attempt) == (BatchStatus.SUCCEEDED, 2)
    assert _attempts(batch_id) == [(1, "failed", "LeaseExpired"), (2, "succeeded", "")]
    assert WatermarkEvent.objects.filter(watermark__job=job).count() == 1
    rows = assert_exactly_once(sink, expected)
    _assert_published_by_final_attempt(rows, batch_id)


def test_a_poison_batch_stops_at_max_attempts_while_other_jobs_flow(tmp_path, chaos_worker):
    worker = chaos_worker(name="poison", concurrency=2)
    poison, _, _, _ = chaos_job(
        tmp_path / "p", "poison", processor="chaos_exit", max_attempts=2, params={"code": 9}
    )
    healthy, expected, sink, _ = chaos_job(tmp_path / "h", "healthy", files=3, max_concurrency=3)
    (poison_batch,) = dispatch.job_run(job=poison).planned
    dispatch.job_run(job=healthy)

    drive(
        lambda: Batch.objects.get(pk=poison_batch).status == BatchStatus.DEAD
        and all_batches_done(healthy),
        timeout=240,
        jobs=[poison, healthy],
        message="the poison batch dead and the healthy job done",
    )

    assert _attempts(poison_batch) == [(1, "failed", "LeaseExpired"), (2, "failed", "LeaseExpired")]
    # each attempt really ended its pool process (the processor's os._exit(9)); an attempt whose
    # lease ran out while its new pool process was still starting Spark is failed by the next
    # acquire before that process reaches the processor, so wait for the fact of its exit
    chaos_wait(
        lambda: worker.log().count("exited with 'exitcode 9'") >= 2,
        timeout=120,
        message="both attempts' pool processes to exit with code 9",
    )
    assert worker.log().count("exited with 'exitcode 9'") == 2, worker.log()[-3000:]
    assert_exactly_once(sink, expected)
    assert_watermark_covers(healthy)
    # no message loops: once dead, nothing keeps delivering the batch
    mentions = worker.log().count(f"batch {poison_batch} ")
    deadline = time.monotonic() + 6
    drive(lambda: time.monotonic() > deadline, timeout=20, jobs=[poison, healthy])
    assert worker.log().count(f"batch {poison_batch} ") == mentions
    assert mentions <= 3 * 2, f"{mentions} deliveries logged for a batch of 2 attempts"


def test_a_broker_redelivery_while_the_batch_runs_takes_nothing(tmp_path, chaos_worker):
    """Redis redelivers the unacknowledged nudge (visibility timeout 3 s, far shorter than the
    batch, which waits at a gate): the worker that gets it again finds the batch leased and takes
    nothing; the batch runs once, its rows land once."""
    short = {"CELERY_VISIBILITY_TIMEOUT": "3"}
    workers = [chaos_worker(name="redeliver-a", env=short)]
    gate = tmp_path / "gates" / "open"
    job, expected, sink, gates = chaos_job(
        # a lease long enough that no heartbeat misses it on a machine at load 40: the batch must
        # still be attempt 1's when the redelivered nudge comes (with 5 s it once expired and the
        # redelivery legitimately took the batch over)
        tmp_path,
        "redeliver",
        rows=10,
        lease_seconds=60,
        params={"gate": str(gate)},
    )
    (batch_id,) = dispatch.job_run(job=job).planned
    chaos_wait(lambda: (gates / f"started-{batch_id}-1").exists(), timeout=90, message="start")

    # past the visibility timeout, a worker that connects restores the unacknowledged nudge to
    # the queue (kombu does it when it starts polling, and every 100 s after) and takes it again
    # while the batch still waits at its gate
    time.sleep(4)
    workers.append(chaos_worker(name="redeliver-b", env=short))

    def redelivered() -> bool:
        return sum(w.log().count(f"'job': {job.pk}, 'batches': {{}}") for w in workers) >= 1

    chaos_wait(redelivered, timeout=90, message="the redelivered nudge to find nothing to take")
    assert not _succeeded(batch_id)  # it was still running when the redelivery came
    gate.touch()
    chaos_wait(lambda: _succeeded(batch_id), timeout=60, message="the batch to succeed")

    assert _attempts(batch_id) == [(1, "succeeded", "")]
    assert WatermarkEvent.objects.filter(watermark__job=job).count() == 1
    assert_exactly_once(sink, expected)
    # the same message twice (one task id), not a second nudge: a task id the first worker
    # received that the second ran and found nothing to take (a nudge sent after the commit may
    # also reach the second worker: that one is not the redelivery); the first worker's task ends
    # (and logs it) a moment after the commit the test saw, so wait for that fact
    idle = re.findall(
        rf"run_job\[([0-9a-f-]+)\] succeeded[^\n]*'job': {job.pk}, 'batches': {{}}",
        workers[1].log(),
    )
    received_first = set(re.findall(r"run_job\[([0-9a-f-]+)\] received", workers[0].log()))
    redelivered = set(idle) & received_first
    assert redelivered, workers[1].log()[-2000:]

    def took() -> set[str]:
        return set(re.findall(r"run_job\[([0-9a-f-]+)\] succeeded", workers[0].log()))

    chaos_wait(
        lambda: redelivered <= took(), timeout=120, message="the first worker to end the same task"
    )
