"""The soak's web faults (bench/soak_faults.py: web_kill, web_stop): a real gunicorn serving the
REST API, through which the driver asks, with an operator's API token, for backfills over ranges
its jobs already committed (a backfill rewrites them: the checker must still find each source row
once in each sink). Each fault lands on the gunicorn worker process that answers those requests:

- web_kill: the worker is SIGKILLed; counted when the master started another worker (a new pid)
  and that one answered a backfill request (201, or 409 when that range is already being
  rewritten by an earlier backfill).
- web_stop: the worker is SIGSTOPped; a backfill request sent meanwhile gets no answer within
  REQUEST_TIMEOUT (it waits on the listening socket), then the worker is continued; counted when
  that request failed and the same worker answered the next one. The request that timed out is
  served late: the client gave up on a backfill that exists anyway, and asks again.
"""

import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.soak_machine import ROOT

REQUEST_TIMEOUT = 3.0
START_TIMEOUT = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role_token(username: str, role: str | None = None) -> str:
    """An API token of a new user in `role` (default the operator's, who may create backfills;
    the admin's may also correct watermarks, a replay among them)."""
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token

    from inventory.roles import OPERATOR, role_groups_ensure

    role_groups_ensure()
    user = User.objects.create_user(username=username)
    user.groups.add(Group.objects.get(name=role or OPERATOR))
    return Token.objects.create(user=user).key


def operator_token(username: str) -> str:
    return role_token(username)


class Web:
    """gunicorn as deployed (controlplane.web_command), one worker process."""

    def __init__(self, *, env: dict, log_dir: Path, token: str):
        self.env, self.log_path, self.token = env, log_dir / "gunicorn.log", token
        self.proc = None
        self.url = ""

    def start(self) -> None:
        from controlplane.web_command import gunicorn_argv

        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                gunicorn_argv(bind=f"127.0.0.1:{port}", workers=1),
                cwd=ROOT,
                env={**self.env, "DEBUG": "false"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not answer; log:\n{self.log()[-3000:]}")
            time.sleep(0.5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def worker_pid(self) -> int | None:
        """The master's one worker process, when it has one."""
        path = f"/proc/{self.proc.pid}/task/{self.proc.pid}/children"
        try:
            pids = [int(p) for p in Path(path).read_text().split()]
        except (OSError, ValueError):
            return None
        return pids[0] if len(pids) == 1 else None

    def request(
        self, method: str, path: str, body=None, *, timeout: float = 30, token: str = ""
    ) -> int:
        """The HTTP status of the answer; OSError when none came (refused, reset, timed out).
        With the operator's token unless `token` is given."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Token {token or self.token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status
        except urllib.error.HTTPError as answer:
            return answer.code

    def answers(self) -> bool:
        try:
            return self.request("GET", "/api/v1/jobs/", timeout=5) == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class WebFaults:
    """The web faults and the backfills they disturb; `jobs` are the jobs backfills may rewrite."""

    def __init__(self, web: Web, jobs):
        self.web, self.jobs = web, list(jobs)
        self.asked = 0  # backfill requests sent
        self.created = 0  # of them answered 201

    def _committed_range(self):
        """(job name, first item, last item) of a committed batch nothing replaced yet."""
        from inventory.models import Batch, BatchStatus

        batch = (
            Batch.objects.filter(
                job__in=self.jobs, status=BatchStatus.SUCCEEDED, replaced_by__isnull=True
            )
            .select_related("job")
            .order_by("?")
            .first()
        )
        if batch is None:
            return None
        return batch.job.name, batch.span.lower, batch.span.upper - 1

    def backfill(self, target, *, timeout: float = 30) -> int:
        name, first, last = target
        self.asked += 1
        body = {"job": name, "range_start": first, "range_end": last}
        status = self.web.request("POST", "/api/v1/backfills/", body, timeout=timeout)
        self.created += status == 201
        return status

    def kill(self):
        """SIGKILL the worker; the check to settle later (None: it could not start)."""
        target, old = self._committed_range(), self.web.worker_pid()
        if target is None or old is None:
            return None
        os.kill(old, signal.SIGKILL)

        def landed() -> bool:
            new = self.web.worker_pid()
            if new in (None, old):
                return False
            try:
                return self.backfill(target) in (201, 409)
            except OSError:
                return False  # the new worker is still starting

        return landed

    def stop(self) -> bool:
        """SIGSTOP the worker while a backfill request is sent, then SIGCONT: landed or not."""
        target, pid = self._committed_range(), self.web.worker_pid()
        if target is None or pid is None:
            return False
        os.kill(pid, signal.SIGSTOP)
        try:
            self.backfill(target, timeout=REQUEST_TIMEOUT)
            failed = False
        except OSError:
            failed = True
        finally:
            os.kill(pid, signal.SIGCONT)
        again = random.choice([target, self._committed_range() or target])
        try:
            answered = self.backfill(again) in (201, 409)
        except OSError:
            answered = False
        return failed and answered and self.web.worker_pid() == pid
