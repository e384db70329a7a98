"""The production web process for tests: gunicorn serving the app (static files by WhiteNoise)
on a free loopback port, on this test session's database. Loaded as a plugin from conftest."""

import subprocess
import urllib.error
import urllib.request

import pytest

from controlplane.loopback import free_port
from controlplane.web_command import gunicorn_argv
from tests.support.worker_fixtures import ROOT, wait_until

TOKEN_READS_PER_MINUTE = 20


def stop_process(proc: subprocess.Popen, *, timeout: float = 20) -> None:
    """Stop a server the tests started: SIGTERM, then SIGKILL if it has not exited in time."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer (a login redirect, 401) means the server is up
    except OSError:
        return False


class WebServer:
    def __init__(self, proc: subprocess.Popen, url: str, log_path):
        self.proc, self.url, self.log_path = proc, url, log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def web_server(worker_env, static_root, cache_of_this_session, tmp_path_factory):
    """gunicorn with DEBUG off, as `make demo`, the image and docker compose run it."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen(
        gunicorn_argv(bind=f"127.0.0.1:{port}"),
        cwd=ROOT,
        # a low read rate for token clients, to see the throttle hold across gunicorn's workers
        # (browser tests log in with sessions, which are not throttled)
        env={
            **worker_env,
            "DEBUG": "false",
            # the collected, hashed files, as production serves them (not development's finders)
            "TIDEMARK_STATIC_FROM_SOURCE": "false",
            "STATIC_ROOT": str(static_root),
            "API_RATE_READ": f"{TOKEN_READS_PER_MINUTE}/min",
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    server = WebServer(proc, url, log_path)

    def up():
        if proc.poll() is not None:
            pytest.fail(f"gunicorn exited; log:\n{server.log()[-4000:]}")
        return http_answers(f"{url}/accounts/login/")

    wait_until(up, timeout=60, message="gunicorn to answer")
    yield server
    stop_process(proc)
