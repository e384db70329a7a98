"""The `tidemark` command against the production web server (a plugin tests/conftest.py loads):
`api_server` (gunicorn, one per test module), `admin` (the user the command logs in as, with
PASSWORD), `workdir` (a folder under the data folder with a copy of examples/pipelines.yaml), and
`cli` (a `Cli` running the command as a subprocess); `one_line_error` checks a refusal's output."""

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from controlplane.loopback import free_port
from controlplane.web_command import gunicorn_argv
from tests.support.server_fixtures import http_answers, stop_process
from tests.support.worker_fixtures import ROOT, wait_until

EXAMPLE = ROOT / "examples" / "pipelines.yaml"
PASSWORD = "a long test password 7"


@pytest.fixture(scope="module")
def api_server(worker_env, static_root, cache_of_this_session, tmp_path_factory):
    """gunicorn as deployed, with the default token rates (the shared `web_server` keeps reads
    low to test the throttle; a command line session reads more than that)."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("cli-gunicorn") / "gunicorn.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen(
        gunicorn_argv(bind=f"127.0.0.1:{port}", workers=1),
        cwd=ROOT,
        env={**worker_env, "DEBUG": "false", "STATIC_ROOT": str(static_root)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"

    def up():
        if proc.poll() is not None:
            pytest.fail(f"gunicorn exited; log:\n{log_path.read_text()[-4000:]}")
        return http_answers(f"{url}/accounts/login/")

    wait_until(up, timeout=60, message="gunicorn to answer")
    yield url
    stop_process(proc)


@pytest.fixture
def admin(transactional_db):
    from django.contrib.auth.models import Group, User

    from inventory.roles import role_groups_ensure

    role_groups_ensure()
    user = User.objects.create_user(username="cli-admin", password=PASSWORD)
    user.groups.add(Group.objects.get(name="admin"))
    return user


@pytest.fixture
def workdir():
    """A folder of this test's own under the data folder, with a copy of examples/ in it."""
    from django.conf import settings

    root = Path(settings.DATA_DIR) / f"test-cli-{uuid.uuid4().hex[:8]}"
    (root / "examples").mkdir(parents=True)
    shutil.copy(EXAMPLE, root / "examples" / "pipelines.yaml")
    (root / "var" / "demo" / "landing").mkdir(parents=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


class Cli:
    def __init__(self, url: str, config_home: Path):
        self.url = url
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")},
            "XDG_CONFIG_HOME": str(config_home),
            "PYTHONUNBUFFERED": "1",
        }

    def argv(self, *args) -> list[str]:
        return [sys.executable, "-m", "tidemark_cli", *map(str, args)]

    def run(self, *args, input: str | None = None, ok: bool = True, timeout: float = 120):
        done = subprocess.run(
            self.argv(*args),
            cwd=ROOT,
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if ok and done.returncode != 0:
            pytest.fail(f"tidemark {' '.join(map(str, args))} failed:\n{done.stderr}{done.stdout}")
        return done

    def json(self, *args):
        return json.loads(self.run(*args, "--output", "json").stdout)

    def login(self):
        return self.run(
            "login",
            "--url",
            self.url,
            "--username",
            "cli-admin",
            "--password-stdin",
            input=PASSWORD + "\n",
        )


@pytest.fixture
def cli(api_server, tmp_path):
    return Cli(api_server, tmp_path / "config")


def one_line_error(done) -> str:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]
