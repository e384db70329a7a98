"""What the soak's faults need of the machine (bench/soak_faults.py): the embedded servers'
directories, a small tmpfs for a sink, a worker clock that can jump (libfaketime), and a real
`celery beat` process."""

import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
CND_SHIM_SOURCE = ROOT / "bench" / "faketime_site" / "cnd_timedwait.c"


def wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} did not end in {timeout:.0f} s")
        time.sleep(0.05)


# ---- the machine: what a fault needs ------------------------------------------------------------


def embedded_dirs() -> tuple[Path | None, Path | None]:
    """(the embedded PostgreSQL's directory, the embedded Redis's) when this process uses them."""
    from django.conf import settings

    data = Path(settings.DATA_DIR)
    pg = data / "pg"
    host = str(settings.DATABASES["default"].get("HOST") or "")
    pg_dir = pg if not os.environ.get("DATABASE_URL") and host == str(pg) else None
    redis_dir = data / "redis"
    redis = not os.environ.get("REDIS_URL") and str(redis_dir) in settings.REDIS_URL
    return pg_dir, (redis_dir if redis else None)


def tmpfs_mount(path: Path, size: str = "32m") -> str:
    """Mount a small tmpfs at `path`; '' when done, else why not."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mount: {exc}"
    return "" if done.returncode == 0 else f"mount refused: {done.stderr.strip()}"


def tmpfs_unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def faked_clocks_missing() -> str:
    """'' when a worker's clock can jump here, else why not."""
    if not FAKETIME_LIB.exists():
        return f"no libfaketime at {FAKETIME_LIB} (apt-get install faketime)"
    if shutil.which("cc") is None:
        return f"no C compiler (cc) to build {CND_SHIM_SOURCE.name}, without which librdkafka hangs"
    return ""


def cnd_shim(work: Path) -> Path:
    """bench/faketime_site/cnd_timedwait.c built once into `work`: libfaketime leaves C11's
    cnd_timedwait (librdkafka's timed wait) unconverted; the file says why."""
    shim = work / "clocks" / "cnd_timedwait.so"
    if not shim.exists():
        shim.parent.mkdir(parents=True, exist_ok=True)
        built = shim.with_suffix(".tmp")
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(built), str(CND_SHIM_SOURCE)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        built.rename(shim)
    return shim


def faketime_env(work: Path, name: str) -> dict:
    """A worker's environment for a clock of its own: libfaketime preloaded in its Python
    processes only (bench/faketime_site drops LD_PRELOAD before any JVM starts), its offset read
    from a file the fault rewrites, monotonic clocks left real; before it, the cnd_timedwait shim
    so that every timed wait agrees with the faked clock as it would with a real one."""
    clock = work / "clocks" / f"{name}.offset"
    clock.parent.mkdir(parents=True, exist_ok=True)
    clock.write_text("+0\n")
    return {
        "LD_PRELOAD": f"{cnd_shim(work)} {FAKETIME_LIB}",
        "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_NO_CACHE": "1",  # a jump shows at once (0.9.10 caches the file 10 s)
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DISABLE_SHM": "1",  # no semaphore shared across the forked pool processes
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "bench" / "faketime_site"), os.environ.get("PYTHONPATH")])
        ),
        "SOAK_CLOCK_PROBE": str(work / "clocks" / f"{name}.probe"),
    }


class Beat:
    """A real `celery beat` (the project's DatabaseScheduler and schedules) sending to the soak's
    queue; `kill` is SIGKILL, `start` a new one."""

    def __init__(self, *, env: dict, log_dir: Path):
        self.env, self.log_dir = env, log_dir
        self.proc = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.log_path = self.log_dir / f"beat-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(ROOT / ".venv" / "bin" / "celery"), "-A", "controlplane", "beat"]
                + ["--loglevel=INFO", "-s", str(self.log_dir / "beat-schedule")],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except (AttributeError, FileNotFoundError):
            return ""

    def sent(self) -> int:
        """Tasks this beat sent so far."""
        return self.log().count("Sending due task")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


RECEIVED = re.compile(r"Task tidemark\.run_job\[([0-9a-f-]+)\] received")


def redeliveries_seen(logs: list[str]) -> int:
    """Task ids received by more than one worker (from their logs): a message the broker
    delivered again."""
    seen = Counter()
    for log in logs:
        seen.update(set(RECEIVED.findall(log)))
    return sum(1 for n in seen.values() if n > 1)
