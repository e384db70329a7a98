"""`make demo` end to end: embedded PostgreSQL and Redis, a worker, beat and the web server as
children, the pipeline applied from its pipelines files, the first files, then only the new files;
then, on the running demo, the issue's path for a newcomer with the real `tidemark` console script
(login, apply examples/pipelines.yaml, jobs, backfill preview); Ctrl-C stops it all without a
traceback.

Slow (a fresh embedded PostgreSQL, migrations and a worker's SparkSession; a minute or two on an
idle 2-core machine), so one demo serves the module, in its own data folder, with no
DATABASE_URL/REDIS_URL. The data folder is `<tmp>/var` and examples/pipelines.yaml is copied
unchanged to `<tmp>/examples/`, the layout of a fresh clone: its relative paths
(../var/demo/landing) lead to this demo's order files.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.worker_fixtures import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_JOB = "example-customer-totals"
TIDEMARK = Path(sys.executable).parent / "tidemark"  # the console script pip installed


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


class Demo:
    def __init__(self, base: Path):
        self.base, self.data = base, base / "var"
        self.log_path = base / "demo.out"
        self.proc: subprocess.Popen | None = None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self) -> None:
        # a newcomer's environment: none of the settings earlier tests put into this process's
        # environment (the test database's fence DSN, queues, processor modules) may leak in
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_QUEUE", "SPARK_MASTER")
            and not key.startswith(("TIDEMARK_", "TM_"))
        }
        env.update(TIDEMARK_DATA_DIR=str(self.data), TIDEMARK_DEV="1", PYTHONUNBUFFERED="1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "demo", "--port", "0", "--timeout", "400"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def serving():
            assert self.proc.poll() is None, self.output()[-5000:]
            return "press Ctrl-C to stop" in self.output()

        wait_until(serving, timeout=600, interval=1, message="the demo to get to serving")

    def interrupt(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to every process of the foreground group."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            self.proc.wait(timeout=90)

    def clean_up(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        _stop_embedded_services(self.data)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    base = tmp_path_factory.mktemp("demo")
    (base / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "pipelines.yaml", base / "examples" / "pipelines.yaml")
    running = Demo(base)
    try:
        running.start()
        yield running
    finally:
        running.clean_up()


FOREIGN = "my-orders-copy"
FOREIGN_JOB = f"""version: 1
jobs:
  - name: {FOREIGN}
    connector: demo-orders
    processor: passthrough
    sink: {{kind: files, path: ../var/mine/orders, format: parquet}}
    batch_weight: 1000000
    paused: true
"""


def _tidemark(config_home: Path, *args, input: str | None = None) -> str:
    done = subprocess.run(
        [str(TIDEMARK), *map(str, args)],
        cwd=config_home.parent,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")},
            "XDG_CONFIG_HOME": str(config_home),
        },
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"tidemark {' '.join(map(str, args))}:\n{done.stderr}{done.stdout}"
    return done.stdout


def test_slow_tidemark_on_the_running_demo_logs_in_applies_runs_and_previews(demo, tmp_path):
    out = demo.output()
    url = re.search(r"The dashboard is up \(\d+ s after the start\): (http://\S+)/", out).group(1)
    password = re.search(r"username admin, password (\S+)", out).group(1)
    config = tmp_path / "config"
    run = lambda *args, **kw: _tidemark(config, *args, **kw)  # noqa: E731

    login = run("login", "--url", url, "--username", "admin", "--password-stdin", input=password)
    assert f"logged in to {url} as admin" in login
    assert json.loads((config / "tidemark" / "config.json").read_text())["default_url"] == url

    # the demo's own pipeline is what its applied pipelines files say
    applied = demo.data / "demo" / "pipelines"
    for name, objects in (("orders.yaml", 3), ("history-then-live.yaml", 4)):
        unchanged = f"Plan: 0 to create, 0 to change, 0 to reset, {objects} unchanged."
        assert unchanged in run("plan", "-f", applied / name)

    pipelines = demo.base / "examples" / "pipelines.yaml"
    plan = run("plan", "-f", pipelines)
    assert "Plan: 2 to create, 0 to change, 0 to reset, 0 unchanged." in plan
    applied = run("apply", "-f", pipelines)
    assert "created connector example-orders" in applied
    assert f"created job {EXAMPLE_JOB}" in applied
    assert "Applied: 2 created, 0 changed, 0 reset, 0 unchanged." in applied

    jobs = run("jobs")
    row = next(line for line in jobs.splitlines() if line.startswith(EXAMPLE_JOB))
    assert "example-orders" in row and "example_customer_totals" in row
    # the demo's own jobs are there too, applied from its pipelines files
    assert "demo-orders-hourly" in jobs and "demo-follow-live" in jobs

    # the demo's worker runs it: the processor comes from the example package's entry point
    assert "batch(es) planned" in run("jobs", "run", EXAMPLE_JOB)

    def committed():
        # the worker plans the next batch after each commit: done when nothing is left to do
        rows = json.loads(run("batches", "--job", EXAMPLE_JOB, "-o", "json"))
        assert not [r for r in rows if r["status"] in ("failed", "dead")], rows
        lag = json.loads(run("jobs", "show", EXAMPLE_JOB, "-o", "json"))["lag"]
        done = rows and all(r["status"] == "succeeded" for r in rows) and lag["items"] == 0
        return done and rows

    batches = wait_until(committed, timeout=300, interval=1, message="the example job's batches")
    assert sum(r["item_count"] for r in batches) == 8  # the demo's 8 order files
    first, last = min(r["range_start"] for r in batches), max(r["range_end"] for r in batches)
    job = json.loads(run("jobs", "show", EXAMPLE_JOB, "-o", "json"))
    assert job["weight_unit"] == "bytes" and job["lag"]["items"] == 0
    assert job["watermark"]["position"] > last
    # current with no lag, the watermark past the files, a budget of 50 MB
    shown = (
        rf"^{EXAMPLE_JOB}\s+example-orders\s+current\s+none\s+example_customer_totals\s+(\d+)"
        r"\s+50\.0 MB"
    )
    assert int(re.search(shown, run("jobs"), re.M).group(1)) > last
    sink = demo.data / "examples" / "customer-totals"
    assert list(sink.rglob("*.parquet")), "the example job wrote nothing"

    preview = run("backfill", "preview", "--job", EXAMPLE_JOB, "--range", first, last)
    assert f"backfill of job {EXAMPLE_JOB}: items {first}..{last}" in preview
    # a files job's weight is bytes, shown as a size
    assert re.search(r"8 item\(s\), weight \d+(\.\d)? (kB|MB)", preview), preview
    assert re.search(r"^FIRST_ITEM\s+LAST_ITEM\s+ITEM_COUNT\s+WEIGHT$", preview, re.M)
    assert re.search(r"^\d+\s+\d+\s+2\s+\d+(\.\d)? kB$", preview, re.M), preview

    # a user's own job on the demo's connector: the next `make demo` must say what to do
    mine = demo.base / "examples" / "mine.yaml"
    mine.write_text(FOREIGN_JOB)
    assert f"created job {FOREIGN}" in run("apply", "-f", mine)


def test_slow_the_demo_processes_the_first_files_then_only_the_new_ones_and_stops_on_ctrl_c(demo):
    demo.interrupt()
    out = demo.output()
    assert demo.proc.returncode == 0, out[-5000:]
    assert "Traceback" not in out
    assert "stopping..." in out
    children = [int(pid) for pid in re.findall(r"\(pid (\d+)\)", out)]
    assert len(children) == 4  # the Kafka broker, the worker, beat and the web server
    for pid in children:
        assert not _running(pid), f"child {pid} outlived the demo"
    assert "`make stop` stops them" in out

    password = re.search(r"username admin, password (\S+)", out)
    assert password and len(password.group(1)) >= 12
    # the pipeline comes from its pipelines files, applied through the API as `tidemark apply`
    pipelines = demo.data / "demo" / "pipelines"
    assert f"applying the pipelines file {pipelines / 'orders.yaml'}" in out
    assert "created connector demo-orders\n" in out
    assert "created job demo-orders-hourly\n" in out and "created job demo-customers\n" in out
    assert "Applied: 3 created, 0 changed, 0 reset, 0 unchanged." in out
    assert "created connector demo-orders-live\n" in out
    assert "Applied: 4 created, 0 changed, 0 reset, 0 unchanged." in out
    assert "discovery registered 6 new file(s)" in out
    assert "only the new files were processed: yes" in out
    second_round = out.split("5. new files", 1)[1].split("6. history then live", 1)[0]
    assert second_round.count("succeeded attempt 1") == 2
    arrived = second_round.split("arrived", 1)[1].split("\n", 1)[0]
    assert len(set(re.findall(r"orders-[\d-]+h\.parquet", arrived))) == 2, arrived
    # the events are dated relative to now: the watermark is minutes behind, not months
    mark = re.findall(r"demo-orders-hourly\s+watermark -> (\S+)", out)[-1]
    behind = datetime.now(UTC) - datetime.fromisoformat(mark)
    assert timedelta(0) < behind < timedelta(minutes=30), mark
    # history then live: the table's history, then the topic from the synced offsets, each once
    assert "demo-orders-history is completed; released demo-orders-live" in out
    assert "every order exactly once across the switch: yes" in out
    assert "46 rows, 46 distinct orders (1..46)" in out
    # the Kafka job's retention-breach forecast: caught up with the topic, so retention never
    # reaches what it needs
    assert (
        "retention forecast of demo-follow-live (topic retention.ms 86400000): safe: catching up "
        "faster than retention advances" in out
    ), out
    assert "dashboard      http://127.0.0.1:" in out
    assert "worker, beat and web server stopped" in out
    assert (demo.data / "demo" / "sinks" / "orders_hourly").is_dir()
    renamed = re.search(r"(\d+) renamed by the new files, (\d+) of them still with", out)
    assert renamed and int(renamed.group(1)) > 0 and renamed.group(1) == renamed.group(2)


def test_slow_a_second_demo_under_a_users_job_on_its_connector_says_what_to_do_in_one_line(demo):
    """After the user added a job on a demo connector (the first test), `make demo` again neither
    crashes with a traceback nor deletes the user's job: it names the job and the command."""
    if demo.proc.poll() is None:
        demo.interrupt()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_QUEUE", "SPARK_MASTER")
        and not key.startswith(("TIDEMARK_", "TM_"))
    }
    env.update(TIDEMARK_DATA_DIR=str(demo.data), TIDEMARK_DEV="1", TIDEMARK_DEMO_ONCE="1")
    again = subprocess.run(
        [sys.executable, "manage.py", "demo", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = again.stdout + again.stderr
    assert again.returncode == 1, out
    assert "Traceback" not in out
    refusal = [line for line in out.splitlines() if FOREIGN in line]
    assert len(refusal) == 1, out
    assert f"job {FOREIGN} use(s) the demo's pipeline" in refusal[0]
    assert f"tidemark jobs delete {FOREIGN}" in refusal[0]
    assert "username admin" not in out  # refused before it changed anything
