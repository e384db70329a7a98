"""The demo's child processes (a Celery worker, beat, the gunicorn web server): started with the
demo's environment and logs, watched, and stopped in order; and the wait for the web server's first
answer, when the demo prints its URL and login. A mixin of the `demo` command (`self.logs`,
`self.children`, `self.began`, `self.timeout`, `self._say` are the command's)."""

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import CommandError

from controlplane.web_command import gunicorn_argv


class DemoChildren:
    def _free_port(self, wanted: int) -> int:
        """`wanted` if nothing listens there, else (or for 0) any free port."""
        if wanted:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", wanted)) != 0:
                    return wanted
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def _web_ready(self, port: int, password: str) -> None:
        """Wait until the web server answers, then say how to log in, at once."""
        from urllib.error import HTTPError
        from urllib.request import urlopen

        url = f"http://127.0.0.1:{port}/"
        while True:
            self._check_children()
            try:
                with urlopen(f"{url}accounts/login/", timeout=2):
                    break
            except HTTPError:
                break  # an answer all the same
            except OSError:
                if time.monotonic() - self.began > self.timeout:
                    raise CommandError(f"the web server did not answer; see {self.logs}") from None
                time.sleep(0.3)
        line = "-" * 72
        self.stdout.write(
            f"{line}\n"
            f"   The dashboard is up ({time.monotonic() - self.began:.0f} s after the start): {url}\n"
            f"   Log in as: admin   password: {password}\n"
            "   The walkthrough below goes on while you look; refresh to see it arrive.\n"
            f"{line}"
        )

    def _start_children(self, port: int, *, names: tuple[str, ...]) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": settings.DATABASE_URL,
            "REDIS_URL": settings.REDIS_URL,
            "TIDEMARK_DATA_DIR": str(settings.DATA_DIR),
            "TIDEMARK_DEV": os.environ.get("TIDEMARK_DEV", "1"),
            "PYTHONUNBUFFERED": "1",
        }
        celery = [sys.executable, "-m", "celery", "-A", "controlplane"]
        commands = {
            "worker": [
                *celery,
                "worker",
                "--pool=prefork",
                "--concurrency=1",
                "-Q",
                settings.CELERY_TASK_DEFAULT_QUEUE,
                "-n",
                f"demo-{os.getpid()}@%h",
                "--without-mingle",
                "--without-gossip",
                "--loglevel=INFO",
            ],
            "beat": [*celery, "beat", "--loglevel=INFO"],
            # the production web process: gunicorn, static files served by WhiteNoise
            "web": gunicorn_argv(bind=f"127.0.0.1:{port}"),
        }
        started = []
        for name, argv in commands.items():
            if name not in names:
                continue
            log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - the child holds it
            proc = subprocess.Popen(
                argv,
                cwd=settings.BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the demo, which stops them in order
            )
            log.close()
            self.children.append((name, proc))
            started.append((name, proc))
        # the broker the history scenario started is named once, with the worker
        named = {name for name, _ in self._named_children}
        shown = [(n, p) for n, p in self.children if n not in named]
        self._named_children += shown
        self._say(
            "   started",
            ", ".join(f"{name} (pid {proc.pid})" for name, proc in shown)
            + f"; logs in {self.logs}",
        )

    def _check_children(self) -> None:
        for name, proc in self.children:
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise CommandError(f"the {name} exited with code {proc.returncode}:\n{tail}")

    def _stop_children(self) -> None:
        for _name, proc in reversed(self.children):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # celery: warm shutdown, sessions stopped
        deadline = time.monotonic() + 30
        for name, proc in reversed(self.children):
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.stdout.write(f"   {name} did not stop in time; killing it")
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            else:
                try:  # anything the child left behind in its process group (e.g. a JVM)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.children:
            self.stdout.write("   worker, beat and web server stopped")
        self.children = []

    def _serve(self) -> None:
        while True:
            self._check_children()
            time.sleep(1)
