"""The soak's faults (bench/bench_soak.py): what is injected, and when it counts as landed.

One fault at a time, round robin over FAULT_KINDS, each only where it can land (a batch running
in a process of ours, a worker left to do the work), and counted only when it provably did:

- sigkill: the pool process running a batch is killed (it was a child of one of our workers);
- sigstop: a whole worker is stopped past its lease, then continued from a timer;
- redelivery: the worker whose pool runs a batch (it holds that task's message unacknowledged,
  acks_late) is stopped past the visibility timeout, then a new worker starts consuming and the
  oldest retires (Redis restores the message whose visibility timeout passed); counted when, after
  it, a task id was received by a second worker (their logs), else given up after
  REDELIVERY_WAIT_SECONDS and tried again later;
- redis_restart: the embedded Redis is killed and started again empty (a new server pid);
- postgres_restart: the embedded PostgreSQL is shut down fast (every session cut) and started
  again by a new process (a new postmaster pid);
- full_disk: the files sink's tmpfs is filled while a batch of that job runs, and freed once an
  attempt failed with "No space left on device" stored as its error;
- clock_jump: a worker's wall clock (libfaketime, Python side only) jumps an hour forward (its next
  jump back to the real time), counted when
  a batch that worker ran read the jumped clock;
- beat: the real `celery beat` running the reaper, retry requeue and pacing is SIGKILLed and
  started again (counted when the new beat has sent a task);
- web_kill, web_stop: the gunicorn worker serving the REST API, through which backfills over
  committed ranges are asked, is SIGKILLed or SIGSTOPped and continued (bench/soak_web.py).

Kinds that cannot land on this machine (no mount, no libfaketime, a Redis or PostgreSQL that is
not this checkout's embedded one) are named in `Run.not_possible` with the reason, never skipped
silently.
"""

import errno
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.soak_machine import (
    Beat,
    embedded_dirs,
    faked_clocks_missing,
    faketime_env,
    redeliveries_seen,
    wait_gone,
)

FAULT_KINDS = (
    "sigkill",
    "sigstop",
    "redelivery",
    "redis_restart",
    "postgres_restart",
    "full_disk",
    "clock_jump",
    "beat",
    "web_kill",
    "web_stop",
)
ROOT = Path(__file__).resolve().parent.parent
CLOCK_JUMP_SECONDS = 3600
FULL_DISK_HOLD_SECONDS = 60  # at most, when no attempt meets the full disk
REDELIVERY_WAIT_SECONDS = 60  # for a task id received by a second worker after a rotation
# a running batch's holder whose clock moved more recently than this may hold its message under
# the jumped clock (see Faults._clock_real_since)
REDELIVERY_CLOCK_QUIET_SECONDS = 300
MAX_GIVE_UPS = 5  # tries of one kind that did not land before the soak stops trying it


def _parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class Pool:
    """The soak's workers. `start(name, env_extra=..., wait_for_spark=...)` is the caller's worker
    factory (tests/support/worker_fixtures.py's WorkerProcess, started); `rotate` starts a new worker,
    then retires the oldest one. With `work` and libfaketime, each worker has a clock file."""

    def __init__(self, start, count: int, *, work: Path | None = None):
        self.start_worker, self.work = start, work
        self.clocks_missing = faked_clocks_missing() if work is not None else "no work directory"
        self.clocks = not self.clocks_missing
        self.serial = 0
        self.retired = []
        # started side by side, then warmed: each JVM starts while the others do
        self.workers = [self._start(wait_for_spark=False) for _ in range(count)]
        for worker in self.workers:
            worker.wait_for_spark(sessions=1)

    def _start(self, wait_for_spark: bool = True):
        name = f"soak-{self.serial}"
        self.serial += 1
        env = faketime_env(self.work, name) if self.clocks else {}
        worker = self.start_worker(name, env_extra=env, wait_for_spark=wait_for_spark)
        worker.soak_name = name
        return worker

    def live(self):
        return [w for w in self.workers if w.proc.poll() is None]

    def rotate(self) -> None:
        fresh = self._start(wait_for_spark=False)
        oldest = self.workers.pop(0)
        self.workers.append(fresh)
        self.retired.append(oldest)
        threading.Thread(target=oldest.stop, daemon=True).start()

    def logs(self) -> list[str]:
        return [w.log() for w in self.workers + self.retired]


def _db_now():
    """The database's clock_timestamp(): attempts' times are the database's."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


# ---- the faults ---------------------------------------------------------------------------------


class Faults:
    """Injects one fault at a time and counts those that landed (see the module's docstring).
    A fault whose landing shows later (full_disk, clock_jump, beat) stays `pending` until it
    does or gives up; no other fault starts meanwhile."""

    def __init__(
        self, *, pool, jobs, settings, run, work: Path, beat: Beat | None = None, web=None
    ):
        self.pool, self.jobs, self.settings, self.run = pool, jobs, settings, run
        self.work, self.beat_proc, self.web = work, beat, web
        self.turn = 0
        self.next_at = 0.0
        self.resume_after = 0
        self.frozen: dict[int, threading.Timer] = {}
        self.pending = None  # (kind, check, give_up_at)
        self.clock_moved: dict[str, float] = {}  # a worker's name: when clock_jump last moved it
        self.pg_dir, self.redis_dir = embedded_dirs()
        self.sink_disk = work / "sink-files"
        self._possible()

    def _possible(self) -> None:
        why = self.run.not_possible
        if self.redis_dir is None:
            why["redis_restart"] = "Redis is given in REDIS_URL, not this checkout's embedded one"
        if self.pg_dir is None:
            why["postgres_restart"] = "PostgreSQL is given in DATABASE_URL, not the embedded one"
        if not self.pool.clocks:
            why["clock_jump"] = self.pool.clocks_missing
        if self.beat_proc is None:
            why["beat"] = "no beat process"
        if self.web is None:
            why["web_kill"] = why["web_stop"] = "no web process"

    def kinds(self):
        """The kinds still to try: possible here, and not given up MAX_GIVE_UPS times (then the
        run ends and the test names the kind that never landed, rather than trying for hours)."""
        return [
            k
            for k in FAULT_KINDS
            if k not in self.run.not_possible and self.run.gave_up[k] < MAX_GIVE_UPS
        ]

    def due(self) -> bool:
        return self.pending is not None or any(
            self.run.faults[k] < self.settings.faults_per_kind for k in self.kinds()
        )

    def _committed(self) -> int:
        from inventory.models import Batch, BatchStatus

        return Batch.objects.filter(
            job__in=self.jobs.values(), status=BatchStatus.SUCCEEDED
        ).count()

    def _spaced(self, now: float) -> None:
        """The next fault waits a lease and as many commits as there are workers: faults never
        come faster than the work they disturb (a killed pool process's new JVM takes minutes on
        a loaded machine)."""
        self.next_at = now + self.settings.lease_seconds
        self.resume_after = self._committed() + self.settings.workers

    def step(self) -> None:
        """Settle a pending fault; else the next kind still short of its count, if it can land
        now; else the one after."""
        now = time.monotonic()
        if self.pending is not None:
            kind, check, give_up_at = self.pending
            landed = check()
            if landed or now > give_up_at:
                self.pending = None
                self.run.faults[kind] += bool(landed)
                self.run.gave_up[kind] += not landed
                self._spaced(now)
            return
        kinds = self.kinds()
        if now < self.next_at or not self.due() or not kinds:
            return
        if self._committed() < self.resume_after:
            return
        kind = kinds[self.turn % len(kinds)]
        self.turn += 1
        if self.run.faults[kind] < self.settings.faults_per_kind and getattr(self, kind)():
            self.run.events.append((now, f"fault {kind}"))
            self._spaced(now)

    def _count(self, kind: str) -> bool:
        self.run.faults[kind] += 1
        return True

    def _running_batch(self, job=None):
        from inventory.models import Batch, BatchStatus

        jobs = [job] if job is not None else self.jobs.values()
        return (
            Batch.objects.filter(job__in=jobs, status=BatchStatus.RUNNING)
            .order_by("?")
            .values_list("id", "worker")
            .first()
        )

    # -- worker signals

    def sigkill(self) -> bool:
        running = self._running_batch()
        if running is None:
            return False
        pid = int(running[1].rsplit(":", 1)[1])
        if _parent_pid(pid) not in {w.proc.pid for w in self.pool.live()}:
            return False
        os.kill(pid, signal.SIGKILL)
        return self._count("sigkill")

    def sigstop(self) -> bool:
        candidates = [w for w in self.pool.live() if w.proc.pid not in self.frozen]
        if len(candidates) < 2 or self._running_batch() is None:
            return False  # someone must go on working
        worker = random.choice(candidates)
        os.killpg(worker.proc.pid, signal.SIGSTOP)
        # continued by a timer: a process stopped inside a transaction holds its row locks, and
        # this driver's own queries may wait for them until it is continued
        timer = threading.Timer(self.settings.lease_seconds + 3, self._thaw, [worker.proc.pid])
        timer.daemon = True
        self.frozen[worker.proc.pid] = timer
        timer.start()
        return self._count("sigstop")

    def _thaw(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.frozen.pop(pid, None)

    def redelivery(self) -> bool:
        """A message held past its visibility timeout: the holder of a running batch's task is
        stopped until that timeout has passed (a task that ends sooner, as most do on a quiet
        machine, leaves nothing to restore), then the pool rotates; the holder is continued once
        the message was received again, or 20 s after the rotation."""
        running = self._running_batch()
        if running is None or self.frozen:
            return False
        parent = _parent_pid(int(running[1].rsplit(":", 1)[1]))
        holder = next((w for w in self.pool.live() if w.proc.pid == parent), None)
        if holder is None or not self._clock_real_since(holder, REDELIVERY_CLOCK_QUIET_SECONDS):
            return False
        before = redeliveries_seen(self.pool.logs())
        os.killpg(holder.proc.pid, signal.SIGSTOP)
        now = time.monotonic()
        rotate_at = now + self.settings.visibility_timeout + 2
        give_up_at = rotate_at + REDELIVERY_WAIT_SECONDS
        # continued at the latest 20 s after the rotation: a stopped process holds its row locks,
        # and this driver's own queries may wait for them
        timer = threading.Timer(rotate_at - now + 20, self._thaw, [holder.proc.pid])
        timer.daemon = True
        self.frozen[holder.proc.pid] = timer
        timer.start()
        rotated = []

        def landed() -> bool:
            if not rotated:
                if time.monotonic() < rotate_at:
                    return False
                self.pool.rotate()
                rotated.append(True)
            if redeliveries_seen(self.pool.logs()) <= before:
                return False
            timer.cancel()
            self._thaw(holder.proc.pid)
            return True

        self.pending = ("redelivery", landed, give_up_at)
        return True

    def _clock_real_since(self, worker, seconds: float) -> bool:
        """The worker's clock is real and was not moved in the last `seconds`. Kombu scores a
        message it holds unacknowledged by its holder's wall clock, and the other workers restore
        it once their clocks pass that score plus the visibility timeout: a message taken while
        its holder's clock ran an hour ahead (clock_jump) comes back an hour late, so a redelivery
        tried on it could never land in time."""
        if not self.pool.clocks:
            return True
        try:
            offset = int((self.work / "clocks" / f"{worker.soak_name}.offset").read_text() or 0)
        except (OSError, ValueError):
            return False
        moved_at = self.clock_moved.get(worker.soak_name, float("-inf"))
        return offset == 0 and time.monotonic() - moved_at > seconds

    def release(self) -> None:
        for pid, timer in list(self.frozen.items()):
            timer.cancel()
            self._thaw(pid)
        self._free_disk()

    # -- servers

    def redis_restart(self) -> bool:
        from controlplane import embedded

        if self._running_batch() is None:
            return False
        pid_file = self.redis_dir / "redis.pid"
        before = int(pid_file.read_text().split()[0])
        os.kill(before, signal.SIGKILL)  # no persistence: every message is gone
        wait_gone(before, 30)
        embedded.redis_url(self.redis_dir.parent)
        after = int(pid_file.read_text().split()[0])
        return after != before and Path(f"/proc/{after}").exists() and self._count("redis_restart")

    def postgres_restart(self) -> bool:
        from django.db import connections

        if self._running_batch() is None or self.frozen:
            return False
        pid_file = self.pg_dir / "postmaster.pid"
        before = int(pid_file.read_text().split()[0])
        os.kill(before, signal.SIGINT)  # fast shutdown: every session is cut
        wait_gone(before, 60)
        connections.close_all()  # this process's connections died with the server
        # a new process starts it again, as the next Tidemark process would
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path; from controlplane import embedded; "
                "embedded.postgres_url(Path(sys.argv[1]))",
                str(self.pg_dir.parent),
            ],
            cwd=ROOT,
            check=True,
            timeout=120,
        )
        after = int(pid_file.read_text().split()[0])
        return after != before and self._count("postgres_restart")

    # -- the files sink's disk

    def full_disk(self) -> bool:
        from inventory.models import BatchAttempt

        job = self.jobs["files"]
        if self._running_batch(job) is None:
            return False
        since = _db_now()
        filler = self.sink_disk / ".filler"
        chunk = b"\0" * (1 << 20)
        try:
            with open(filler, "wb") as out:
                while True:
                    out.write(chunk)
                    out.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise

        def landed() -> bool:
            failed = BatchAttempt.objects.filter(
                batch__job=job, outcome="failed", finished_at__gte=since
            ).values_list("error", flat=True)
            hit = any("No space left on device" in str(error) for error in failed)
            if hit or time.monotonic() > give_up_at - 1:
                self._free_disk()
            return hit

        give_up_at = time.monotonic() + FULL_DISK_HOLD_SECONDS
        self.pending = ("full_disk", landed, give_up_at)
        return True

    def _free_disk(self) -> None:
        (self.sink_disk / ".filler").unlink(missing_ok=True)

    # -- a worker's clock

    def clock_jump(self) -> bool:
        workers = [w for w in self.pool.live() if w.proc.pid not in self.frozen]
        if not workers or self._running_batch() is None:
            return False
        worker = random.choice(workers)
        clock = self.work / "clocks" / f"{worker.soak_name}.offset"
        probe = self.work / "clocks" / f"{worker.soak_name}.probe"
        # an hour forward, then back to the real time: a step forward first (the one that made
        # librdkafka's timed waits last an hour under libfaketime alone, cnd_timedwait.c), then
        # a step back of an hour; each jump shows as a new offset
        now = int(clock.read_text().strip() or 0)
        offset = 0 if now else CLOCK_JUMP_SECONDS
        clock.write_text(f"{offset:+d}\n")
        jumped_at = time.time()
        self.clock_moved[worker.soak_name] = time.monotonic()

        def landed() -> bool:
            """A batch of that worker read its clock after the jump: the probe file's content is
            the faked time, its mtime the kernel's real one."""
            try:
                faked = float(probe.read_text())
                real = probe.stat().st_mtime
            except (OSError, ValueError):
                return False
            return real > jumped_at + 1 and abs(faked - real - offset) < 60

        self.pending = ("clock_jump", landed, time.monotonic() + 120)
        return True

    # -- beat

    def beat(self) -> bool:
        if self.beat_proc.proc is None or self.beat_proc.sent() == 0:
            return False  # a beat that has not worked yet proves nothing when killed
        self.beat_proc.kill()
        if self.beat_proc.proc.returncode != -signal.SIGKILL:
            return False
        self.beat_proc.start()
        self.pending = ("beat", lambda: self.beat_proc.sent() > 0, time.monotonic() + 120)
        return True

    # -- the web process (bench/soak_web.py), while backfills are asked through it

    def web_kill(self) -> bool:
        landed = self.web.kill()
        if landed is None:
            return False
        self.pending = ("web_kill", landed, time.monotonic() + 120)
        return True

    def web_stop(self) -> bool:
        return self.web.stop() and self._count("web_stop")
