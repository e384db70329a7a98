"""The API client and the `tidemark` command send the token only to the server it belongs to
(issue 42, item 6). urllib copies every header onto a redirect, to any host: a server (or anything
in between) answering 302 to another host received `Authorization: Token ...`.

Two real loopback HTTP servers: `home` (the server given as the URL) redirects, `elsewhere`
records every request's headers. A redirect to another port or scheme is refused before anything
is sent there, with one line saying so; a redirect within `home` is followed with the token."""

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.worker_fixtures import ROOT
from tidemark_client import RedirectRefused, Tidemark

TOKEN = "a" * 40


class _Server:
    def __init__(self, answer):
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen.append((self.command, self.path, dict(self.headers), body))
                status, headers, payload = answer(self)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = _any

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    elsewhere = _Server(lambda handler: (200, {"Content-Type": "application/json"}, b"[]"))

    def home_answer(handler):
        if handler.path.startswith("/api/v1/moved/"):  # within the same origin
            return 302, {"Location": "/api/v1/jobs/"}, b""
        if handler.path.startswith("/api/v1/jobs/"):
            return 200, {"Content-Type": "application/json"}, b'[{"name": "here"}]'
        if handler.path.startswith("/api/v1/other-scheme/"):
            return 307, {"Location": f"https://127.0.0.1:{home.httpd.server_address[1]}/x"}, b""
        return 302, {"Location": elsewhere.url + handler.path}, b""

    home = _Server(home_answer)
    yield home, elsewhere
    home.close()
    elsewhere.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_the_client_refuses_a_redirect_to_another_server_and_sends_it_nothing(servers, method):
    home, elsewhere = servers
    client = Tidemark(home.url, token=TOKEN, timeout=5)
    with pytest.raises(RedirectRefused) as refused:
        client.request(method, "jobs-somewhere/", {} if method == "POST" else None)
    assert elsewhere.seen == []
    assert refused.value.location.startswith(elsewhere.url)
    message = str(refused.value)
    assert home.url in message and elsewhere.url in message and TOKEN not in message
    # the token did go to the server it was given for
    assert home.seen[0][2]["Authorization"] == f"Token {TOKEN}"


def test_the_client_refuses_a_redirect_to_another_scheme_of_the_same_host(servers):
    home, elsewhere = servers
    with pytest.raises(RedirectRefused, match="https://127.0.0.1"):
        Tidemark(home.url, token=TOKEN, timeout=5).get("other-scheme/")


def test_a_redirect_within_the_server_is_followed_with_the_token(servers):
    home, elsewhere = servers
    assert Tidemark(home.url, token=TOKEN, timeout=5).get("moved/") == [{"name": "here"}]
    assert [path for _, path, _, _ in home.seen] == ["/api/v1/moved/", "/api/v1/jobs/"]
    assert home.seen[1][2]["Authorization"] == f"Token {TOKEN}"
    assert elsewhere.seen == []


def test_the_command_says_in_one_line_that_it_did_not_follow_the_redirect(servers, tmp_path):
    home, elsewhere = servers
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TIDEMARK_", "DJANGO_"))
    }
    env.update(
        TIDEMARK_URL=home.url,
        TIDEMARK_TOKEN=TOKEN,
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        HOME=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-m", "tidemark_cli", "-o", "json", "connectors"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "redirected to another server" in lines[0] and elsewhere.url in lines[0]
    assert TOKEN not in done.stderr + done.stdout
    assert elsewhere.seen == []
