"""The SQL that PostgreSQL runs for Tidemark, kept in `.sql` files (see README.md here).

- `schema/*.sql`: the current definition of every SQL function, one concern per file
  (`SCHEMA_FILES`, in the order they can be created).
- `migrations/0001_baseline.sql`, then `migrations/NNNN_*.sql`: the baseline's SQL objects and
  the numbered changes after it, applied by Django migrations through
  `migrations_utils.RunSQLFile`; never edited once a migration applies them.
- `queries.sql`: the statements the services send, each under `-- name: <name>`, read with `query()`.
- `dashboard.sql`: the overview's, alerts' and /metrics' reads, around one definition of a job's
  state, read with `dashboard_query()`.
- `source_table.sql`: statements sent to a `table` connector's own database (templates whose
  `{table}`/`{column}` are filled with checked, quoted identifiers), read with `source_query()`.
"""

import json
import re
from functools import cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent

# creation order: SQL-language functions are checked against what exists when they are created
SCHEMA_FILES = (
    "statuses.sql",
    "moves.sql",
    "transitions.sql",
    "planning.sql",
    "commit.sql",
    "publish.sql",
    "acquire.sql",
    "prefix_sums.sql",
    "registration.sql",
    "rates.sql",
)

_NAME = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def schema_sql() -> str:
    """Every current function definition, as one script."""
    return "\n".join((SQL_DIR / "schema" / name).read_text() for name in SCHEMA_FILES)


@cache
def _queries(filename: str = "queries.sql") -> dict[str, str]:
    text = (SQL_DIR / filename).read_text()
    parts = _NAME.split(text)
    queries = {}
    # parts: [preamble, name, body, name, body, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{filename} names {name!r} twice")
        queries[name] = body.strip().rstrip(";").strip()
    return queries


def query(name: str) -> str:
    """The statement named `name` in queries.sql (a KeyError names a missing one at import time
    of the module that asks for it)."""
    return _queries()[name]


def dashboard_query(name: str) -> str:
    """The statement named `name` in dashboard.sql (the overview's, alerts' and /metrics' reads);
    those named `health_*` read `health` and are sent after `job_health` (its WITH list)."""
    statements = _queries("dashboard.sql")
    body = statements[name]
    return f"{statements['job_health']}\n{body}" if name.startswith("health_") else body


def source_query(name: str) -> str:
    """The template named `name` in source_table.sql (run on a table connector's database)."""
    return _queries("source_table.sql")[name]


def json_value(raw):
    """A json/jsonb column as read by raw SQL, decoded. Django's psycopg2 connection hands jsonb
    over as its text (only a model's JSONField decodes it), so a watermark's value would arrive
    as '"2026-03-04T23:57:36+00:00"' or '{"0": 23}'. Every raw read of a JSON column goes
    through here; a value already decoded (another driver, a json_build result) is kept."""
    if isinstance(raw, str | bytes | bytearray):
        return json.loads(raw)
    return raw
