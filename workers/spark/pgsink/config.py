"""A sink's configuration read and checked: identifiers, the table, the mode and key, the DSN (never
the control plane's own database)."""

import os
import re

from workers.spark.errors import SinkError, scrub_dsn

MODES = ("append", "upsert", "coalesce")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# the schema of the sink's own bookkeeping (ledger, key and column versions) in a sink database
BOOKKEEPING_SCHEMA = "tidemark_sink"


def valid_identifier(name, what: str, *, field: str | None = None) -> str:
    """`name` if it is a plain identifier; SinkError naming the sink key `field` otherwise."""
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
        error = SinkError(
            f"{what} {name!r} is not a valid identifier (letters, digits, _; at most 63 chars)"
        )
        error.field = field
        raise error
    return name


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_name_of(value) -> tuple[str, str]:
    if not isinstance(value, str) or not value:
        raise SinkError("sink 'table' must be 'schema.table' or 'table'")
    parts = value.split(".")
    if len(parts) > 2:
        raise SinkError(f"sink 'table' {value!r} must be 'schema.table' or 'table'")
    if len(parts) == 1:
        parts = ["public", parts[0]]
    schema = valid_identifier(parts[0], "sink schema", field="table")
    if schema == BOOKKEEPING_SCHEMA:
        raise SinkError(
            f"sink 'table' {value!r} is in schema {BOOKKEEPING_SCHEMA}, where Tidemark keeps "
            "which batches each sink table holds; choose another schema"
        )
    return schema, valid_identifier(parts[1], "sink table", field="table")


def mode_of(sink: dict) -> str:
    mode = sink.get("mode", "upsert")
    if mode not in MODES:
        raise SinkError(f"sink 'mode' must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def key_of(value, *, mode: str, columns: list[str] | None) -> list[str]:
    if value is None:
        value = []
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise SinkError("sink 'key' must be a list of column names")
    if not value and mode != "append":
        raise SinkError(f"sink 'key' is required for mode {mode!r}")
    missing = [] if columns is None else [k for k in value if k not in columns]
    if missing:
        raise SinkError(f"sink 'key' names columns {missing} that the output lacks ({columns})")
    return value


def refuse_own_database(conn, own_database: list[str] | None, dsn: str) -> None:
    """The control plane's own database is never a sink, whatever DSN reached it (invariant 10):
    the same server (system identifier) and database as `own_database`, checked on the very
    connection that would write, before anything is created."""
    import psycopg2

    if not own_database:
        return
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT extract(epoch FROM pg_postmaster_start_time())::text, current_database()"
            )
            theirs = [str(value) for value in cur.fetchone()]
        conn.rollback()
    except psycopg2.Error as exc:
        raise SinkError(
            f"cannot tell whether the sink is Tidemark's own database: {scrub_dsn(exc, dsn)}"
        ) from None
    if theirs == [str(value) for value in own_database]:
        raise SinkError(
            "the sink's database is Tidemark's own database (users, tokens, the inventory); "
            "it is never a sink, in any schema: write to another database"
        )


def dsn_of(sink: dict) -> str:
    env_name = sink.get("dsn_env")
    if env_name is not None:
        if not isinstance(env_name, str) or not env_name:
            raise SinkError("sink 'dsn_env' must name an environment variable")
        dsn = os.environ.get(env_name)
        if not dsn:
            raise SinkError(f"environment variable {env_name} (sink 'dsn_env') is not set")
        return dsn
    dsn = sink.get("dsn")
    if isinstance(dsn, str) and dsn:
        return dsn
    raise SinkError("sink needs 'dsn_env': the name of an environment variable holding the DSN")
