"""A source in another PostgreSQL database (a `table`, a remote `meta_table`): the read-only
connection named by `dsn_env`, and the refusal to read Tidemark's own tables through it when the
DSN reaches Tidemark's database (invariant 10)."""

import psycopg2

from inventory.services import endpoints
from inventory.services.errors import InvalidInput
from inventory.services.own_database import is_own_database
from inventory.services.secrets import credential_value, mask_text
from inventory.sources.identity import source_table_check
from inventory.sql import source_query

CONNECT_TIMEOUT = 5


class source_connection:  # noqa: N801 - a context manager used as a function
    """A read-only connection to the source named by `dsn_env`; InvalidInput(field) when the
    variable is unset or the database cannot be reached (the message never holds the DSN)."""

    def __init__(self, config: dict, *, field: str):
        self.config, self.field, self.conn = config, field, None

    def __enter__(self):
        name = self.config["dsn_env"]
        dsn = credential_value(name, field=self.field)
        if not dsn:
            raise InvalidInput(
                self.field, f"environment variable {name} is not set in the control plane"
            )
        endpoints.dsn_check(dsn, field=self.field)
        try:
            self.conn = psycopg2.connect(
                dsn, connect_timeout=CONNECT_TIMEOUT, application_name="tidemark-source"
            )
            self.conn.set_session(readonly=True, autocommit=True)
            with self.conn.cursor() as cursor:
                # UTC: a timestamptz comes back as the instant it is, whatever the role's
                # TimeZone, so a value near the end of year 9999 stays in Python's range
                cursor.execute("SET statement_timeout = '60s'; SET TimeZone = 'UTC'")
        except psycopg2.Error as exc:
            if self.conn is not None:
                self.conn.close()
            raise InvalidInput(
                self.field, f"cannot connect to the database in ${name}: {first_line(exc)}"
            ) from None
        return self.conn

    def __exit__(self, *exc_info):
        if self.conn is not None:
            self.conn.close()


def first_line(exc: BaseException) -> str:
    return mask_text(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def refuse_own_tables(conn, relation: str, *, field: str) -> None:
    """A DSN that points at Tidemark's own database may name no Tidemark table (invariant 10);
    `relation` is quoted as for SQL ('"public"."orders"'). On any database, a relation in a
    system schema (`pg_*`, `information_schema`) is no source: the shared catalogs (`pg_authid`
    with every role's password hash) are one per server, Tidemark's own server included."""
    if is_own_database(conn):
        source_table_check(relation, field=field)
        return
    with conn.cursor() as cursor:
        cursor.execute(source_query("relation_schema"), {"relation": relation})
        found = cursor.fetchone()
    if found and (found[0].startswith("pg_") or found[0] == "information_schema"):
        raise InvalidInput(
            field, f"{found[0]}.{found[1]} is a system catalog; it cannot be a source"
        )
