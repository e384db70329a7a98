"""Tidemark's own database, recognised whatever the route to it (docs/design.md, invariant 10).

One rule for sources and sinks: a connection reaches Tidemark's database when it lands on the same
running server (its start time, `pg_postmaster_start_time()`, or PostgreSQL's `system_identifier`
where it can be read, which also catches a replica) and the same database, however
the DSN spells host, port, user or schema. A source on it may name no Tidemark table
(`sources/remote_database.refuse_own_tables`); a sink may not write into it at all, in any schema (users,
tokens, the inventory, `pg_catalog`, views), checked here when a job is saved and again by the
PostgreSQL sink on its own connection right before it writes (`workers/spark/pgsink.py`, given
`own_database_identity()` in the batch's spec).
"""

import os

import psycopg2
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from psycopg2.extensions import parse_dsn

from inventory.services.errors import InvalidInput
from inventory.sql import gateway, source_query

CONNECT_TIMEOUT = 5

# settings of Tidemark itself that hold a DSN: never a sink's dsn_env
OWN_DSN_SETTINGS = ("DATABASE_URL",)

REFUSED = (
    "is Tidemark's own database (users, tokens, the inventory); it is never a sink, "
    "in any schema: write to another database"
)


def own_database_identity() -> list[str]:
    """[server start time, database name] of the database Tidemark runs on (what the PostgreSQL
    sink compares on its own connection, `workers/spark/pgsink.py`)."""
    return gateway.own_identity("server_identity")


def connection_identity(conn) -> list[str]:
    """The same pair for any psycopg2 connection."""
    with conn.cursor() as cursor:
        cursor.execute(source_query("server_identity"))
        return [str(value) for value in cursor.fetchone()]


def is_own_database(conn) -> bool:
    if connection_identity(conn) == own_database_identity():
        return True
    # a replica of Tidemark's database: the same system identifier, where both can read it
    try:
        with conn.cursor() as cursor:
            cursor.execute(source_query("table_identity"))
            theirs = [str(value) for value in cursor.fetchone()]
        with transaction.atomic():
            ours = gateway.own_identity("table_identity")
    except (psycopg2.Error, DatabaseError):
        if not conn.autocommit:
            conn.rollback()
        return False
    return theirs == ours


def sink_refuse_own_database(sink: dict) -> None:
    """InvalidInput naming `sink.dsn_env` / `sink.dsn` when a PostgreSQL sink reaches Tidemark's
    own database by any route. A sink that cannot be reached now is not refused here (its
    variable may be set only on the workers): the sink checks again before it writes."""
    env_name = sink.get("dsn_env")
    field = "sink.dsn_env" if env_name is not None else "sink.dsn"
    if env_name in OWN_DSN_SETTINGS:
        raise InvalidInput(field, f"${env_name} {REFUSED}")
    dsn = os.environ.get(env_name) if isinstance(env_name, str) else sink.get("dsn")
    if not isinstance(dsn, str) or not dsn:
        return
    where = f"${env_name}" if env_name is not None else "the DSN"
    if dsn == settings.DATABASE_URL or _same_address(dsn):
        raise InvalidInput(field, f"{where} {REFUSED}")
    try:
        conn = psycopg2.connect(
            dsn, connect_timeout=CONNECT_TIMEOUT, application_name="tidemark-sink-check"
        )
    except psycopg2.Error:
        return
    try:
        conn.set_session(readonly=True, autocommit=True)
        own = is_own_database(conn)
    except psycopg2.Error:
        own = False
    finally:
        conn.close()
    if own:
        raise InvalidInput(field, f"{where} {REFUSED}")


def _same_address(dsn: str) -> bool:
    """The DSN names the host, port and database Tidemark's connection uses (whatever the user or
    password): caught even when the check cannot connect."""
    try:
        theirs = parse_dsn(dsn)
    except psycopg2.ProgrammingError:
        return False
    ours = connection.get_connection_params()
    our_db = ours.get("database") or ours.get("dbname")
    their_db = theirs.get("dbname") or theirs.get("user") or os.environ.get("PGDATABASE")
    if their_db != our_db:
        return False
    their_host = theirs.get("host") or os.environ.get("PGHOST") or "/tmp"
    our_host = ours.get("host") or "/tmp"
    their_port = str(theirs.get("port") or os.environ.get("PGPORT") or 5432)
    our_port = str(ours.get("port") or 5432)
    local = {"localhost", "127.0.0.1", "::1"}
    same_host = their_host == our_host or (their_host in local and our_host in local)
    return same_host and their_port == our_port
