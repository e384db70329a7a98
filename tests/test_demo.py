"""`make demo` end to end: embedded PostgreSQL and Redis, a worker, beat and the web server as
children, the first files, then only the new files; `--once` exits after the demonstration.

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


def test_slow_the_demo_processes_the_first_files_then_only_the_new_ones(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_QUEUE", "SPARK_MASTER")
    }
    env.update(TIDEMARK_DATA_DIR=str(tmp_path), TIDEMARK_DEV="1", PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", "demo", "--once", "--port", "0", "--timeout", "400"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        _stop_embedded_services(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]

    password = re.search(r"username admin, password (\S+)", out)
    assert password and len(password.group(1)) >= 12
    assert "discovery registered 6 new file(s)" in out
    assert "only the new files were processed: yes" in out
    second_round = out.split("5. new files", 1)[1].split("6. where to look", 1)[0]
    assert second_round.count("succeeded attempt 1") == 2
    assert "orders-2026-03-01" not in second_round.split("arrived", 1)[1].split("\n", 1)[1]
    assert re.search(r"demo-orders-hourly\s+watermark -> 2026-03-04T23:57:36\+00:00", out)
    assert "dashboard      http://127.0.0.1:" in out
    assert "worker, beat and web server stopped" in out
    assert (tmp_path / "demo" / "sinks" / "orders_hourly").is_dir()
    renamed = re.search(r"(\d+) renamed by the new files, (\d+) of them still with", out)
    assert renamed and int(renamed.group(1)) > 0 and renamed.group(1) == renamed.group(2)
