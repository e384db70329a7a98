"""A database schema as plain data, to compare two databases (or a database with the models): its
tables and columns, constraints, indexes, sequences, functions and triggers, read from the catalog.

Names are the keys; the values are PostgreSQL's own rendering (`format_type`, `pg_get_expr`,
`pg_get_constraintdef`, `pg_get_indexdef`, `pg_get_functiondef`, `pg_get_triggerdef`) with the
schema name removed, so two databases built the same way give equal snapshots whatever their
names. Column order is left out: a table built in one step and the same table grown column by
column hold the same columns in another order, which no query of Tidemark's depends on.

One rendering is normalized: a list of strings compared with a varchar column (Django's `__in`),
`(ARRAY['a'::character varying])::text[]`, comes back from a dump and restore (pg_dump's text
parsed again) as `ARRAY[('a'::character varying)::text]`; both become
`ARRAY['a'::character varying]`.
"""

import re

_CAST_EACH = re.compile(r"\('((?:[^']|'')*)'::character varying\)::text")
_CAST_ARRAY = re.compile(r"\(ARRAY\[([^\]]*)\]\)::text\[\]")


def _normalized(definition: str) -> str:
    return _CAST_ARRAY.sub(r"ARRAY[\1]", _CAST_EACH.sub(r"'\1'::character varying", definition))


# (name, statement); each statement reads the objects of schema %(schema)s
_QUERIES = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity
        FROM pg_attribute AS a
        JOIN pg_class AS c ON c.oid = a.attrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND a.attnum > 0
          AND NOT a.attisdropped
    """,
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint AS k
        JOIN pg_class AS c ON c.oid = k.conrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s
    """,
    "indexes": """
        SELECT t.relname, i.relname, pg_get_indexdef(i.oid)
        FROM pg_index AS x
        JOIN pg_class AS i ON i.oid = x.indexrelid
        JOIN pg_class AS t ON t.oid = x.indrelid
        JOIN pg_namespace AS n ON n.oid = i.relnamespace
        WHERE n.nspname = %(schema)s
    """,
    "sequences": """
        SELECT c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement
        FROM pg_sequence AS s
        JOIN pg_class AS c ON c.oid = s.seqrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s
    """,
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
        FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s
    """,
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger AS t
        JOIN pg_class AS c ON c.oid = t.tgrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
    """,
}


def catalog(cursor, schema: str | None = None) -> dict[str, dict]:
    """The snapshot of `schema` (default: the connection's current schema), read with `cursor`
    (a DB-API cursor: Django's or psycopg's)."""
    if schema is None:
        cursor.execute("SELECT current_schema()")
        (schema,) = cursor.fetchone()
    prefix = re.compile(rf"\b{re.escape(schema)}\.")

    def rows(kind):
        cursor.execute(_QUERIES[kind], {"schema": schema})
        return [
            tuple(_normalized(prefix.sub("", v)) if isinstance(v, str) else v for v in row)
            for row in cursor.fetchall()
        ]

    tables: dict[str, dict] = {}
    for table, column, type_, not_null, default, identity in rows("columns"):
        tables.setdefault(table, {})[column] = {
            "type": type_,
            "not_null": not_null,
            "default": default,
            "identity": identity,
        }
    return {
        "tables": tables,
        "constraints": {
            f"{table}.{name}": f"{kind} {definition}"
            for table, name, kind, definition in rows("constraints")
        },
        "indexes": {f"{table}.{name}": definition for table, name, definition in rows("indexes")},
        "sequences": {name: rest for name, *rest in rows("sequences")},
        "functions": dict(rows("functions")),
        "triggers": {f"{table}.{name}": definition for table, name, definition in rows("triggers")},
    }


def differences(left: dict, right: dict) -> list[str]:
    """What differs between two snapshots, one line per object (empty: the same schema)."""
    found = []
    for kind in left.keys() | right.keys():
        a, b = left.get(kind, {}), right.get(kind, {})
        for name in sorted(a.keys() | b.keys()):
            if name not in b:
                found.append(f"{kind}: {name} only on the left")
            elif name not in a:
                found.append(f"{kind}: {name} only on the right")
            elif a[name] != b[name]:
                found.append(f"{kind}: {name} differs: {a[name]!r} != {b[name]!r}")
    return sorted(found)
