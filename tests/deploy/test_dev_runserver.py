"""Development the Django way: `manage.py runserver` with DEBUG serves every page and the static
files they name from the source folders, with nothing collected (no manifest to miss)."""

import re
import subprocess
import sys
import urllib.request

import pytest

from controlplane.loopback import free_port
from tests.support.server_fixtures import http_answers, stop_process
from tests.support.worker_fixtures import ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode("utf-8", "replace")


def test_runserver_in_debug_serves_pages_and_static_files_without_collectstatic(
    worker_env, tmp_path
):
    empty_root = tmp_path / "never-collected"
    port = free_port()
    log_path = tmp_path / "runserver.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env={**worker_env, "DEBUG": "true", "STATIC_ROOT": str(empty_root)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def up():
            assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
            return http_answers(f"{url}/accounts/login/")

        wait_until(up, timeout=120, message="runserver to answer")
        for page in ("/accounts/login/", "/admin/login/"):
            status, html = _get(f"{url}{page}")
            assert status == 200, page
            for sheet in re.findall(r'href="(/static/[^"]+\.css)"', html):
                status, css = _get(f"{url}{sheet}")
                assert status == 200 and css.strip(), sheet
        status, css = _get(f"{url}/static/admin/css/base.css")
        assert status == 200 and "body" in css
        status, css = _get(f"{url}/static/tidemark.css")
        assert status == 200 and "header.top" in css
        assert not empty_root.exists() or not any(empty_root.iterdir())
    finally:
        stop_process(proc)
