"""`make demo` end to end: embedded PostgreSQL and Redis, a worker, beat and the web server as
children, the first files, then only the new files; Ctrl-C stops it all without a traceback.

Slow (a fresh embedded PostgreSQL, migrations and a worker's SparkSession; about a minute on an
idle 2-core machine), so it runs once, in its own data folder, with no DATABASE_URL/REDIS_URL.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _stop_embedded_services(data_dir: Path) -> None:
    for pid_file in (data_dir / "pg" / "postmaster.pid", data_dir / "redis" / "redis.pid"):
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGINT)  # PostgreSQL: fast shutdown; Redis: shutdown
        except (FileNotFoundError, ValueError, IndexError, ProcessLookupError):
            pass
    time.sleep(1)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = (
        Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}").exists() else ""
    )
    return state != "Z"  # a zombie has exited


def test_slow_the_demo_processes_the_first_files_then_only_the_new_ones_and_stops_on_ctrl_c(
    tmp_path,
):
    # a newcomer's environment: none of the settings earlier tests put into this process's
    # environment (the test database's fence DSN, queues, processor modules) may leak in
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_QUEUE", "SPARK_MASTER")
        and not key.startswith(("TIDEMARK_", "TM_"))
    }
    env.update(TIDEMARK_DATA_DIR=str(tmp_path), TIDEMARK_DEV="1", PYTHONUNBUFFERED="1")
    log_path = tmp_path / "demo.out"
    try:
        with open(log_path, "wb") as log:
            demo = subprocess.Popen(
                [sys.executable, "manage.py", "demo", "--port", "0", "--timeout", "400"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 600
        while "press Ctrl-C to stop" not in log_path.read_text(errors="replace"):
            assert demo.poll() is None, log_path.read_text(errors="replace")[-5000:]
            assert time.monotonic() < deadline, "the demo did not get to serving in 600 s"
            time.sleep(1)
        children = [int(pid) for pid in re.findall(r"\(pid (\d+)\)", log_path.read_text())]
        # what a terminal does on Ctrl-C: SIGINT to every process of the foreground group
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(timeout=90)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
        _stop_embedded_services(tmp_path)
    out = log_path.read_text(errors="replace")
    assert demo.returncode == 0, out[-5000:]
    assert "Traceback" not in out
    assert "stopping..." in out
    assert len(children) == 4  # the Kafka broker, the worker, beat and the web server
    for pid in children:
        assert not _running(pid), f"child {pid} outlived the demo"
    assert "`make stop` stops them" in out

    password = re.search(r"username admin, password (\S+)", out)
    assert password and len(password.group(1)) >= 12
    assert "discovery registered 6 new file(s)" in out
    assert "only the new files were processed: yes" in out
    second_round = out.split("5. new files", 1)[1].split("6. history then live", 1)[0]
    assert second_round.count("succeeded attempt 1") == 2
    assert "orders-2026-03-01" not in second_round.split("arrived", 1)[1].split("\n", 1)[1]
    assert re.search(r"demo-orders-hourly\s+watermark -> 2026-03-04T23:57:36\+00:00", out)
    # history then live: the table's history, then the topic from the synced offsets, each once
    assert "demo-orders-history is completed; released demo-orders-live" in out
    assert "every order exactly once across the switch: yes" in out
    assert "dashboard      http://127.0.0.1:" in out
    assert "worker, beat and web server stopped" in out
    assert (tmp_path / "demo" / "sinks" / "orders_hourly").is_dir()
    renamed = re.search(r"(\d+) renamed by the new files, (\d+) of them still with", out)
    assert renamed and int(renamed.group(1)) > 0 and renamed.group(1) == renamed.group(2)
