"""Database session settings every Tidemark process gets."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FROZEN_IN_A_TRANSACTION = """
import time
import django
from django.db import connection, transaction, OperationalError, InterfaceError
django.setup()
try:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        time.sleep(3)  # idle in the transaction, holding whatever it locked
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    print("still connected")
except (OperationalError, InterfaceError) as exc:
    print("ended by the server:", exc)
"""


def _frozen(timeout: str) -> str:
    from tests.support.worker_fixtures import database_url

    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DB_IDLE_IN_TRANSACTION_TIMEOUT": timeout,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", FROZEN_IN_A_TRANSACTION],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_a_session_idle_in_a_transaction_is_ended_by_the_server(django_db_setup):
    assert "ended by the server" in _frozen("1")
    assert "still connected" in _frozen("0")  # 0 turns the limit off


SESSION_CUT_BETWEEN_REQUESTS = """
import time
import django
import psycopg2
from django.core.signals import request_finished, request_started
from django.db import OperationalError, connection
django.setup()

def request():
    # what every web request does around its queries (gunicorn's worker keeps the connection)
    request_started.send(sender=None)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]
    finally:
        request_finished.send(sender=None)

first = request()
other = psycopg2.connect(**connection.get_connection_params())
other.autocommit = True
with other.cursor() as cursor:
    cursor.execute("SELECT pg_terminate_backend(%s)", [first])
    while True:  # the server restarted, or cut the session: it is gone
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [first])
        if cursor.fetchone()[0] == 0:
            break
        time.sleep(0.1)
try:
    second = request()
    print("answered on a new session" if second != first else "same session?")
except OperationalError as exc:
    print("failed:", exc)
"""


def test_a_request_after_the_database_cut_the_session_gets_a_new_one(django_db_setup):
    """A web worker keeps its connection between requests (DB_CONN_MAX_AGE); after a PostgreSQL
    restart the first request of each worker used to fail (500) on the dead connection: the soak's
    postgres_restart fault caught it. Health checks make Django reconnect first."""
    from tests.support.worker_fixtures import database_url

    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DB_CONN_MAX_AGE": "60",
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", SESSION_CUT_BETWEEN_REQUESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "answered on a new session" in done.stdout, done.stdout + done.stderr
