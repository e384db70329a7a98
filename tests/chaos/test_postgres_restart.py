"""PostgreSQL restarted while a batch runs: every connection (the worker's, its heartbeat's, the
test's) is cut, the server comes back, and nothing stays `running` past its lease; the watermark
and the sink agree, each row exactly once.

Only the embedded PostgreSQL of this checkout is restarted (`make chaos` with DATABASE_URL unset);
a server given in DATABASE_URL is someone else's and is never touched."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from inventory.models import Batch, BatchStatus
from tests.chaos.conftest import (
    all_batches_done,
    assert_exactly_once,
    assert_watermark_covers,
    chaos_job,
    drive,
)
from tests.support.worker_fixtures import ROOT, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

PG_DIR = Path(settings.DATA_DIR) / "pg"
DOWN_SECONDS = 10


def _embedded() -> bool:
    return not os.environ.get("DATABASE_URL") and str(settings.DATABASES["default"]["HOST"]) == str(
        PG_DIR
    )


def _postmaster_pid() -> int:
    return int((PG_DIR / "postmaster.pid").read_text().split()[0])


def _restart_postgres() -> None:
    pid = _postmaster_pid()
    os.kill(pid, signal.SIGINT)  # fast shutdown: every session is cut
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=60, message="PostgreSQL to stop")
    time.sleep(DOWN_SECONDS)
    # a new process starts it again, as the next Tidemark process would
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from pathlib import Path; from controlplane import embedded; "
            f"embedded.postgres_url(Path({str(settings.DATA_DIR)!r}))",
        ],
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    connection.close()  # this process's connection died with the server


@pytest.mark.skipif(
    os.environ.get("DATABASE_URL") is not None,
    reason="restarts only the embedded PostgreSQL; DATABASE_URL names a server this test must "
    "not restart",
)
def test_postgres_restarted_mid_batch_leaves_nothing_running_and_each_row_once(
    tmp_path, chaos_worker
):
    assert _embedded(), "expected the embedded PostgreSQL of this checkout"
    worker = chaos_worker(name="pg-restart")
    gate = tmp_path / "gates" / "open"
    job, expected, sink, gates = chaos_job(
        tmp_path, "pg-restart", files=3, max_concurrency=1, params={"gate": str(gate)}
    )
    drive(
        lambda: list(gates.glob("started-*")),
        timeout=120,
        jobs=[job],
        message="the first batch to be inside its processor",
    )

    before = _postmaster_pid()
    _restart_postgres()
    assert _postmaster_pid() != before  # the fault happened: a new server, every session cut
    gate.touch()  # the batch goes on writing; its commit meets a new server

    drive(lambda: all_batches_done(job), timeout=240, jobs=[job], message="all batches")
    worker.stop()

    assert not Batch.objects.filter(job=job, status=BatchStatus.RUNNING).exists()
    assert_exactly_once(sink, expected)
    assert_watermark_covers(job)
