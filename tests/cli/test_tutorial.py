"""docs/tutorial.md, run as written: its `sh test` blocks with the real `tidemark` command and its
API bodies (`json api METHOD PATH`, what the dashboard's forms send) against the production web
server (gunicorn) and a real worker, so the page cannot rot.

The reader's clone is a folder of this test's own under the data folder (where the tutorial's
`var/tutorial/...` paths must lie); `<your clone>` in the API bodies is that folder. The one
substitution: the `sh install` block's `pip install -e` installs into a folder of this test's own
(`pip install --target`, put on the servers' PYTHONPATH) instead of the shared virtualenv; the
servers start after it, as the tutorial's restart of the demo does. `DEMO_SINK_DSN`, which the
demo sets, names this test process's sink database. After each block the test waits until no
batch is queued, running or failed and no backfill is pending or running, as a reader watching the
dashboard would, taking beat's backfill-pacing step itself meanwhile (the demo runs beat; the
test runs none).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from controlplane.loopback import free_port
from controlplane.web_command import gunicorn_argv
from tests.support.server_fixtures import http_answers, stop_process
from tests.support.worker_fixtures import ROOT, WorkerProcess, read_sink, wait_until

TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.M | re.S)
PASSWORD = "a long tutorial password 9"
INSTALL = "pip install -e var/tutorial/my-processors"


def blocks() -> list[tuple[str, str]]:
    return [(info.strip(), body) for info, body in BLOCK.findall(TUTORIAL.read_text())]


def test_the_tutorial_marks_its_steps_for_this_test():
    kinds = [info for info, _ in blocks()]
    assert kinds.count("sh install") == 1
    assert sum(1 for k in kinds if k.startswith("json api ")) == 2
    assert sum(1 for k in kinds if k == "sh test") >= 8
    assert [body.strip() for info, body in blocks() if info == "sh install"] == [INSTALL]


class Reader:
    """The tutorial's reader: a clone folder, a logged-in `tidemark`, a shell."""

    def __init__(self, clone: Path, url: str, config_home: Path):
        self.clone, self.url = clone, url
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")},
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "XDG_CONFIG_HOME": str(config_home),
            "PYTHONUNBUFFERED": "1",
        }

    def sh(self, script: str) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.clone,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, f"{script}\n---\n{done.stderr}{done.stdout}"
        return done.stdout

    def api(self, method: str, path: str, body: dict):
        from tidemark_cli.api import Api
        from tidemark_cli.config import resolve_token

        os.environ["XDG_CONFIG_HOME"] = self.env["XDG_CONFIG_HOME"]
        try:
            token = resolve_token(self.url)
        finally:
            del os.environ["XDG_CONFIG_HOME"]
        return Api(self.url, token=token).call(method, path.removeprefix("/api/v1/"), body)


def _settled() -> bool:
    from inventory.models import Backfill, Batch
    from inventory.services import dispatch

    dispatch.backfills_pace()  # beat's step (every 5 s in the demo), taken here while waiting

    busy = Batch.objects.filter(status__in=["queued", "running", "failed"])
    dead = list(Batch.objects.filter(status="dead").values_list("pk", "error"))
    assert not dead, f"a batch died: {dead}"
    return not busy.exists() and not Backfill.objects.filter(status__in=["running"]).exists()


@pytest.fixture
def servers(worker_env, static_root, cache_of_this_session, private_queue, tmp_path):
    """Starts gunicorn and a worker on demand, after the reader's package is installed."""
    from tests.support.sink_database import sink_database_dsn

    started = []

    def start(site: Path) -> str:
        env = {
            **worker_env,
            "CELERY_QUEUE": private_queue,
            "PYTHONPATH": str(site),
            "DEMO_SINK_DSN": sink_database_dsn(),
            "TIDEMARK_CREDENTIALS": worker_env["TIDEMARK_CREDENTIALS"] + ",DEMO_SINK_DSN",
        }
        worker = WorkerProcess(env=env, queue=private_queue, name="tutorial", log_dir=tmp_path)
        started.append(worker)
        worker.start()
        port = free_port()
        log_path = tmp_path / "gunicorn.log"
        with open(log_path, "wb") as log:
            web = subprocess.Popen(
                gunicorn_argv(bind=f"127.0.0.1:{port}", workers=1),
                cwd=ROOT,
                env={**env, "DEBUG": "false", "STATIC_ROOT": str(static_root)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(web)
        url = f"http://127.0.0.1:{port}"

        def up():
            assert web.poll() is None, log_path.read_text()[-4000:]
            return http_answers(f"{url}/accounts/login/")

        wait_until(up, timeout=60, message="gunicorn to answer")
        return url

    yield start
    for process in reversed(started):
        process.stop() if isinstance(process, WorkerProcess) else stop_process(process)


@pytest.mark.django_db(transaction=True)
def test_the_tutorials_commands_run_as_written(servers, tmp_path, request):
    from django.conf import settings
    from django.contrib.auth.models import Group, User

    from inventory.models import Connector, Job, Restatement
    from inventory.roles import role_groups_ensure
    from tests.support.sink_database import sink_cursor

    role_groups_ensure()
    User.objects.create_user(username="reader", password=PASSWORD).groups.add(
        Group.objects.get(name="admin")
    )
    clone = Path(os.path.realpath(settings.DATA_DIR)) / f"tutorial-{uuid.uuid4().hex[:8]}"
    clone.mkdir()
    request.addfinalizer(lambda: shutil.rmtree(clone, ignore_errors=True))
    site = tmp_path / "site"
    with sink_cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS my_orders")

    url = reader = None
    out = {}
    for number, (info, body) in enumerate(blocks()):
        if info == "sh install":
            package = clone / INSTALL.split()[-1]
            installed = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
                + ["--target", str(site), str(package)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert installed.returncode == 0, installed.stderr
            url = servers(site)  # started after the install, as the tutorial restarts the demo
            reader = Reader(clone, url, tmp_path / "config")
            reader.env["PYTHONPATH"] = str(site)  # `processor run` imports it too
            reader.sh(
                f"tidemark login --url {url} --username reader --password-stdin <<< '{PASSWORD}'"
            )
        elif info.startswith("json api "):
            method, path = info.split()[2:]
            reader.api(method, path, json.loads(body.replace("<your clone>", str(clone))))
        elif info == "sh test":
            out[number] = reader.sh(body) if reader else Reader(clone, "", tmp_path).sh(body)
        else:
            continue
        wait_until(_settled, timeout=240, interval=0.5, message=f"block {number} to settle")
        text = out.get(number, "")

        # what each step shows the reader, checked where it happens
        if "tidemark processor run big_orders" in body:
            assert re.search(r"^\s*5\s+ben\s+3100\.0\s*$", text, re.M), text
        if "tidemark jobs run my-big-orders" in body:
            rows = read_sink(clone / "var/tutorial/out/big-orders")
            assert sorted(r["order_id"] for r in rows) == [2, 3, 5, 6, 7]  # amount >= 20
        if "tidemark plan -f var/tutorial/pipelines.yaml\n" in body and "cat >" in body:
            assert "= connector my-orders: no change" in text, text
            assert "= job my-big-orders: no change" in text, text
            assert "+ job my-orders-table: create" in text, text
        if "tidemark jobs run my-orders-table" in body:
            assert "created job my-orders-table" in text
            with sink_cursor() as cursor:
                cursor.execute("SELECT order_id, amount FROM my_orders ORDER BY order_id")
                assert [r[0] for r in cursor.fetchall()] == [1, 2, 3, 4, 5, 6, 7]
        if "tidemark backfill preview" in body:
            assert "changed job my-big-orders: params.min_amount" in text, text
            assert "backfill of job my-big-orders" in text and "3 item(s)" in text, text
        if "tidemark backfill create" in body:
            rows = read_sink(clone / "var/tutorial/out/big-orders")
            assert sorted(r["order_id"] for r in rows) == [3, 5, 6]  # amount >= 50, once each
        if "landing/orders-002.json" in body and "sed -i" in body:  # the correction
            assert Restatement.objects.filter(job__name="my-orders-table").exists()
            with sink_cursor() as cursor:
                cursor.execute("SELECT amount FROM my_orders WHERE order_id = 5")
                assert cursor.fetchone()[0] == 31.0
            rows = read_sink(clone / "var/tutorial/out/big-orders")
            assert sorted(r["order_id"] for r in rows) == [3, 6]  # order 5 is 31 now
        if "--prune tutorial" in body:
            assert "- job my-orders-table: delete (not in the file)" in text, text
            assert "deleted job my-orders-table" in text, text
            assert set(Job.objects.values_list("name", flat=True)) == {"my-big-orders"}
        if "tidemark connectors delete my-orders --yes" in body:
            assert "deleted job my-big-orders" in text and "deleted connector my-orders" in text
            assert not Job.objects.exists() and not Connector.objects.exists()
    assert url is not None, "the tutorial has no install step"
