"""Pausing a worker at an exact step of the publish fence: a row lock held by the test
(`_hold`), whether the fence's function waits on it (`_fence_waiting`), and a job's running
batch (`_running`)."""

import psycopg2

from inventory.models import Batch, BatchStatus
from inventory.services import outputs


def _hold(statement: str, params) -> "psycopg2.extensions.connection":
    conn = psycopg2.connect(outputs.control_plane_dsn())
    with conn.cursor() as cur:
        cur.execute(statement, params)
        assert cur.rowcount == 1
    return conn  # the lock is held until this transaction ends


def _fence_waiting(function: str) -> bool:
    with psycopg2.connect(outputs.control_plane_dsn()) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            [f"%{function}%"],
        )
        return cur.fetchone()[0] > 0


def _running(job):
    return Batch.objects.filter(job=job, status=BatchStatus.RUNNING).first()
