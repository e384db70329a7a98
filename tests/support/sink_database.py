"""A database of its own for PostgreSQL sinks in tests, on the test server.

Tidemark's own database is never a sink (invariant 10), so sinks write here: `<test db>_sinks`,
created once per test process, its DSN from `sink_database_dsn()`. `sink_cursor()` reads it.
"""

import contextlib
import functools

import psycopg2
import pytest
from django.db import connection

from inventory.services.outputs import control_plane_dsn


@functools.cache
def sink_database_dsn() -> str:
    name = f"{connection.settings_dict['NAME']}_sinks"
    admin = psycopg2.connect(control_plane_dsn())
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        admin.close()
    return control_plane_dsn(dbname=name)


@contextlib.contextmanager
def sink_cursor():
    """A cursor on the sink database (autocommit)."""
    conn = psycopg2.connect(sink_database_dsn())
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            yield cursor
    finally:
        conn.close()


@pytest.fixture
def sink_dsn(monkeypatch):
    """The PostgreSQL sink writes into a database of its own (never Tidemark's), its DSN read from
    this variable."""
    monkeypatch.setenv("TM_TEST_SINK_DSN", sink_database_dsn())
    return "TM_TEST_SINK_DSN"
