"""Database session settings every Tidemark process gets."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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
    from tests.worker_fixtures import database_url

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
