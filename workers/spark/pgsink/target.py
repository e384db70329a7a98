"""The target table (created from the DataFrame's schema, with the columns Tidemark adds) and the
ledger of which batch attempt wrote it."""

import re

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from workers.spark.errors import SinkError
from workers.spark.pgsink.config import BOOKKEEPING_SCHEMA, quote_ident


def pg_type(data_type: T.DataType) -> str:
    if isinstance(data_type, T.StringType | T.VarcharType | T.CharType):
        return "text"
    if isinstance(data_type, T.LongType):
        return "bigint"
    if isinstance(data_type, T.IntegerType):
        return "integer"
    if isinstance(data_type, T.ShortType | T.ByteType):
        return "smallint"
    if isinstance(data_type, T.DoubleType):
        return "double precision"
    if isinstance(data_type, T.FloatType):
        return "real"
    if isinstance(data_type, T.DecimalType):
        return f"numeric({data_type.precision},{data_type.scale})"
    if isinstance(data_type, T.BooleanType):
        return "boolean"
    if isinstance(data_type, T.DateType):
        return "date"
    if isinstance(data_type, T.TimestampNTZType):
        return "timestamp"
    if isinstance(data_type, T.TimestampType):
        return "timestamptz"
    if isinstance(data_type, T.BinaryType):
        return "bytea"
    if isinstance(data_type, T.ArrayType | T.MapType | T.StructType):
        return "jsonb"
    return "text"


BATCH_COLUMN = "_tm_batch_id"
# (target, batch) -> the attempt that merged last and its rows
LEDGER = f'"{BOOKKEEPING_SCHEMA}"."ledger"'
# (target, key) -> the source version of the stored row, when no version column is declared
KEY_VERSIONS = f'"{BOOKKEEPING_SCHEMA}"."key_versions"'
# (target, key) -> {column: the source version of its stored non-null value} (coalesce)
COLUMN_VERSIONS = f'"{BOOKKEEPING_SCHEMA}"."column_versions"'


def ensure_target(
    cur,
    df: DataFrame,
    *,
    schema: str,
    table: str,
    key: list[str],
    mode: str = "upsert",
    version_column: str | None = None,
) -> None:
    # two first batches may race to create the table; serialize on its name
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"tidemark.sink:{schema}.{table}"])
    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
    definitions = [
        f"{quote_ident(f.name)} {pg_type(f.dataType)}" + (" NOT NULL" if f.name in key else "")
        for f in df.schema.fields
    ]
    if key:
        definitions.append(f"PRIMARY KEY ({', '.join(quote_ident(k) for k in key)})")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {quote_ident(schema)}.{quote_ident(table)} ({', '.join(definitions)})"
    )
    cur.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s",
        [schema, table],
    )
    existing = {row[0] for row in cur.fetchall()}
    unknown = [c for c in df.columns if c not in existing]
    if unknown:
        raise SinkError(f"columns {unknown} are not in the sink table {schema}.{table}")
    if mode == "append" and BATCH_COLUMN not in existing:
        # which batch wrote each row: a rerun or a replacing batch deletes exactly those rows
        cur.execute(
            f"ALTER TABLE {quote_ident(schema)}.{quote_ident(table)} ADD COLUMN IF NOT EXISTS {quote_ident(BATCH_COLUMN)} bigint"
        )
    if mode != "append" and version_column is not None and version_column not in existing:
        raise SinkError(f"sink 'version_column' {version_column!r} is not in {schema}.{table}")
    # Tidemark's own bookkeeping lives in a schema of its own, beside the user's tables. Created
    # once: batches writing to different tables (other locks above) may get here at the same time,
    # so the creation holds one lock of its own; once the tables exist nobody takes it.
    cur.execute(
        "SELECT to_regclass(%s) IS NULL OR to_regclass(%s) IS NULL OR to_regclass(%s) IS NULL",
        [LEDGER, KEY_VERSIONS, COLUMN_VERSIONS],
    )
    if cur.fetchone()[0]:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["tidemark.sink:bookkeeping"])
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(BOOKKEEPING_SCHEMA)}")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {LEDGER} ("
            "target text NOT NULL, batch_id bigint NOT NULL, attempt integer NOT NULL, "
            "rows bigint NOT NULL, merged_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (target, batch_id))"
        )
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {KEY_VERSIONS} ("
            "target text NOT NULL, key jsonb NOT NULL, version bigint NOT NULL, "
            "PRIMARY KEY (target, key))"
        )
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {COLUMN_VERSIONS} ("
            "target text NOT NULL, key jsonb NOT NULL, versions jsonb NOT NULL, "
            "PRIMARY KEY (target, key))"
        )


def ledger_claim(cur, *, target: str, batch_id: int, attempt: int) -> None:
    """Lock the batch's ledger row; refuse an attempt older than the one that merged last."""
    ledger = LEDGER
    cur.execute(
        f"INSERT INTO {ledger} (target, batch_id, attempt, rows) VALUES (%s, %s, %s, 0) "
        "ON CONFLICT (target, batch_id) DO NOTHING",
        [target, int(batch_id), int(attempt)],
    )
    cur.execute(
        f"SELECT attempt FROM {ledger} WHERE target = %s AND batch_id = %s FOR UPDATE",
        [target, int(batch_id)],
    )
    merged = cur.fetchone()[0]
    if merged > int(attempt):
        from workers.spark.fence import FencedOut

        raise FencedOut(
            f"batch {batch_id} attempt {attempt} may not merge into {target}: "
            f"attempt {merged} already did"
        )


def ledger_record(cur, *, target, batch_id, attempt, rows, replaced) -> None:
    ledger = LEDGER
    cur.execute(
        f"UPDATE {ledger} SET attempt = %s, rows = %s, merged_at = now() "
        "WHERE target = %s AND batch_id = %s",
        [int(attempt), int(rows), target, int(batch_id)],
    )
    if replaced:
        cur.execute(
            f"DELETE FROM {ledger} WHERE target = %s AND batch_id = ANY(%s)",
            [target, [int(i) for i in replaced]],
        )


def drop_leftover_stages(cur, *, schema: str, prefix: str, attempt: int = 0) -> None:
    """Drop staging tables of this batch's earlier attempts that died before cleaning up; a later
    attempt's staging table is never touched (a stale attempt must not damage the live one)."""
    cur.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND starts_with(tablename, %s)",
        [schema, prefix],
    )
    for (name,) in cur.fetchall():
        rest = name[len(prefix) :]
        match = re.match(r"^a(\d+)_", rest)
        if match is not None and int(match.group(1)) >= int(attempt):
            continue
        cur.execute(f"DROP TABLE IF EXISTS {quote_ident(schema)}.{quote_ident(name)}")
