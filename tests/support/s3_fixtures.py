"""A real S3 endpoint for tests: `moto_server` on a free loopback port, one per test session.

Loaded as a plugin from tests/conftest.py. The credentials it accepts live in two environment
variables set when pytest starts (before any worker subprocess copies the environment), so
connectors name them by `key_env`/`secret_env` exactly as in production, and the shared Celery
worker can read them.

- `s3_server`: the running server (`endpoint_url`, `client()` for boto3 uploads).
- `s3_bucket`: a new, empty bucket of the test's own; returns its name.
"""

import os
import subprocess
import uuid

import pytest

from controlplane.loopback import free_port
from tests.support.server_fixtures import http_answers, stop_process
from tests.support.worker_fixtures import ROOT, wait_until

MOTO_SERVER = ROOT / ".venv" / "bin" / "moto_server"
KEY_ENV = "TM_TEST_S3_KEY"
SECRET_ENV = "TM_TEST_S3_SECRET"
SECRET_VALUE = "moto-secret-Zq81vTk2xWp"


def pytest_configure(config):
    os.environ.setdefault(KEY_ENV, "moto-key-AKIATEST")
    os.environ.setdefault(SECRET_ENV, SECRET_VALUE)


class S3Server:
    def __init__(self, proc: subprocess.Popen, endpoint_url: str, log_path):
        self.proc, self.endpoint_url, self.log_path = proc, endpoint_url, log_path

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=os.environ[KEY_ENV],
            aws_secret_access_key=os.environ[SECRET_ENV],
            region_name="us-east-1",
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("moto") / "moto_server.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen(
        [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    server = S3Server(proc, f"http://127.0.0.1:{port}", log_path)

    def up():
        if proc.poll() is not None:
            pytest.fail(f"moto_server exited; log:\n{server.log()[-4000:]}")
        return http_answers(f"{server.endpoint_url}/moto-api/")

    wait_until(up, timeout=60, message="moto_server to answer")
    yield server
    stop_process(proc)


@pytest.fixture
def s3_bucket(s3_server) -> str:
    name = f"tm-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    return name
