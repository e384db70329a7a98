"""PostgreSQL table sink: parallel COPY into a staging table, then one merging transaction.

sink = {"kind": "postgres", "dsn_env": "ENV_VAR", "table": "schema.table", "key": [...],
        "mode": "append" | "upsert" | "coalesce", "order_by": optional column,
        "version_column": optional column}

1. The target table is created from the DataFrame's schema if missing (primary key on `key`).
   Tidemark adds the columns it needs: `_tm_batch_id` (append: which batch wrote the row) and,
   for upsert/coalesce without a `version_column`, `_tm_version` (the batch's source order).
2. Every Spark partition COPYs its rows into an unlogged staging table unique to this attempt,
   from the executors, with nothing but psycopg2. A partition replaces its own rows in the staging
   table, so a retried Spark task does not stage them twice.
3. Inside the publish fence (workers/spark/fence.py), one transaction of the sink database merges:
   - it locks the batch's row in `<schema>._tidemark_sink_ledger` and refuses an attempt older
     than the one recorded there (a stale attempt never overwrites a newer one's rows);
   - append deletes the rows of this batch and of the batches it replaces, then inserts;
   - upsert updates every non-key column, coalesce each column to COALESCE(new, stored), so a
     null in a partial update keeps the stored value; both only where the new row's version is
     not older than the stored one's (the declared `version_column`, else the batch's source
     order), so an older batch committing late never overwrites a newer one. Rows equal to the
     stored ones are not rewritten, so re-running a batch changes nothing;
   - it records (batch, attempt, rows) in the ledger, in the same transaction as the rows.
4. The staging table is dropped.

The DSN is read from the environment variable named by `dsn_env` on the driver and never shown in
an error. Identifiers are validated and quoted; values travel only through COPY or bound params.
"""

import hashlib
import logging
import os
import re
import uuid

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from workers.spark.errors import SinkError, scrub_dsn, spark_error_detail, spark_error_summary
from workers.spark.fence import Publish, static_publish

log = logging.getLogger(__name__)

MODES = ("append", "upsert", "coalesce")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_COPY_CHUNK_CHARS = 4 * 1024 * 1024


def check_postgres(sink: dict) -> None:
    """Validate the config alone (no database, no DataFrame)."""
    _table_name(sink.get("table"))
    mode = _mode(sink)
    key = _key(sink.get("key"), mode=mode, columns=None)
    for name in key:
        _identifier(name, "sink key column")
    env_name = sink.get("dsn_env")
    if env_name is None and not sink.get("dsn"):
        raise SinkError("sink needs 'dsn_env': the name of an environment variable holding the DSN")
    if env_name is not None and (not isinstance(env_name, str) or not env_name):
        raise SinkError("sink 'dsn_env' must name an environment variable")


def write_postgres(
    df: DataFrame,
    sink: dict,
    *,
    batch_id: int,
    attempt: int = 0,
    publish: Publish | None = None,
    version: int | None = None,
    own_database: list[str] | None = None,
) -> dict:
    import psycopg2

    schema, table = _table_name(sink.get("table"))
    mode = _mode(sink)
    columns = list(df.columns)
    for name in columns:
        _identifier(name, "output column")
    key = _key(sink.get("key"), mode=mode, columns=columns)
    order_by = sink.get("order_by")
    if order_by is not None and order_by not in columns:
        raise SinkError(f"sink 'order_by' must name an output column, got {order_by!r}")
    version_column = sink.get("version_column")
    if version_column is not None and (version_column not in columns or version_column in key):
        raise SinkError(
            f"sink 'version_column' must name an output column outside the key, "
            f"got {version_column!r}"
        )
    dsn = _dsn(sink)
    publish = publish or static_publish()

    target = f"{_q(schema)}.{_q(table)}"
    digest = hashlib.md5(f"{schema}.{table}".encode()).hexdigest()[:8]
    stage_prefix = f"_tm_stage_{digest}_{int(batch_id)}_"
    stage_name = f"{stage_prefix}a{int(attempt)}_{uuid.uuid4().hex[:12]}"
    stage = f"{_q(schema)}.{_q(stage_name)}"
    quoted = ", ".join(_q(c) for c in columns)

    try:
        conn = psycopg2.connect(dsn)
    except psycopg2.Error as exc:
        raise SinkError(f"cannot connect to the sink database: {scrub_dsn(exc, dsn)}") from None
    try:
        _refuse_own_database(conn, own_database, dsn)
        try:
            with conn, conn.cursor() as cur:
                _ensure_target(
                    cur,
                    df,
                    schema=schema,
                    table=table,
                    key=key,
                    mode=mode,
                    version_column=version_column,
                )
                _drop_leftover_stages(cur, schema=schema, prefix=stage_prefix, attempt=attempt)
                cur.execute(
                    f"CREATE UNLOGGED TABLE {stage} AS SELECT {quoted}, NULL::integer AS _tm_part "
                    f"FROM {target} WITH NO DATA"
                )
        except psycopg2.Error as exc:
            raise SinkError(f"preparing {schema}.{table} failed: {scrub_dsn(exc, dsn)}") from None
        try:
            _as_text(df).foreachPartition(_partition_copier(dsn, stage, columns))
        except Exception as exc:
            error = SinkError(
                f"copying rows into staging for {schema}.{table} failed: "
                f"{scrub_dsn(spark_error_summary(exc), dsn)}"
            )
            # executors' errors travel through Spark's text: keep the DSN out of it
            error.detail = scrub_dsn(spark_error_detail(exc), dsn)
            raise error from None
        try:
            with publish() as replaced, conn, conn.cursor() as cur:
                _ledger_claim(
                    cur,
                    target=f"{schema}.{table}",
                    batch_id=batch_id,
                    attempt=attempt,
                )
                rows_out, changed = _merge(
                    cur,
                    target=target,
                    stage=stage,
                    columns=columns,
                    key=key,
                    mode=mode,
                    order_by=order_by,
                    batch_id=batch_id,
                    replaced=replaced,
                    version_column=version_column,
                    version=version,
                    target_name=f"{schema}.{table}",
                )
                _ledger_record(
                    cur,
                    target=f"{schema}.{table}",
                    batch_id=batch_id,
                    attempt=attempt,
                    rows=rows_out,
                    replaced=replaced,
                )
        except psycopg2.Error as exc:
            raise SinkError(
                f"merging into {schema}.{table} failed: {scrub_dsn(exc, dsn)}"
            ) from None
    finally:
        try:
            with conn, conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {stage}")
        except psycopg2.Error:
            # never hide the real error; the batch's next attempt drops what is left
            log.warning("could not drop staging table %s.%s", schema, stage_name)
        finally:
            conn.close()
    return {
        "rows_out": rows_out,
        "bytes": None,
        "location": f"{schema}.{table}",
        "rows_changed": changed,
    }


# ---- configuration -------------------------------------------------------------------------------


def _identifier(name, what: str) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise SinkError(
            f"{what} {name!r} is not a valid identifier (letters, digits, _; at most 63 chars)"
        )
    return name


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _table_name(value) -> tuple[str, str]:
    if not isinstance(value, str) or not value:
        raise SinkError("sink 'table' must be 'schema.table' or 'table'")
    parts = value.split(".")
    if len(parts) > 2:
        raise SinkError(f"sink 'table' {value!r} must be 'schema.table' or 'table'")
    if len(parts) == 1:
        parts = ["public", parts[0]]
    return _identifier(parts[0], "sink schema"), _identifier(parts[1], "sink table")


def _mode(sink: dict) -> str:
    mode = sink.get("mode", "upsert")
    if mode not in MODES:
        raise SinkError(f"sink 'mode' must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def _key(value, *, mode: str, columns: list[str] | None) -> list[str]:
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


def _refuse_own_database(conn, own_database: list[str] | None, dsn: str) -> None:
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


def _dsn(sink: dict) -> str:
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


# ---- target table --------------------------------------------------------------------------------


def _pg_type(data_type: T.DataType) -> str:
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
BOOKKEEPING_SCHEMA = "tidemark_sink"
# (target, batch) -> the attempt that merged last and its rows
LEDGER = f'"{BOOKKEEPING_SCHEMA}"."ledger"'
# (target, key) -> the source version of the stored row, when no version column is declared
KEY_VERSIONS = f'"{BOOKKEEPING_SCHEMA}"."key_versions"'


def _ensure_target(
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
    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {_q(schema)}")
    definitions = [
        f"{_q(f.name)} {_pg_type(f.dataType)}" + (" NOT NULL" if f.name in key else "")
        for f in df.schema.fields
    ]
    if key:
        definitions.append(f"PRIMARY KEY ({', '.join(_q(k) for k in key)})")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {_q(schema)}.{_q(table)} ({', '.join(definitions)})")
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
            f"ALTER TABLE {_q(schema)}.{_q(table)} ADD COLUMN IF NOT EXISTS {_q(BATCH_COLUMN)} bigint"
        )
    if mode != "append" and version_column is not None and version_column not in existing:
        raise SinkError(f"sink 'version_column' {version_column!r} is not in {schema}.{table}")
    # Tidemark's own bookkeeping lives in a schema of its own, beside the user's tables. Created
    # once: batches writing to different tables (other locks above) may get here at the same time,
    # so the creation holds one lock of its own; once the tables exist nobody takes it.
    cur.execute("SELECT to_regclass(%s) IS NULL OR to_regclass(%s) IS NULL", [LEDGER, KEY_VERSIONS])
    if cur.fetchone()[0]:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["tidemark.sink:bookkeeping"])
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {_q(BOOKKEEPING_SCHEMA)}")
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


def _ledger_claim(cur, *, target: str, batch_id: int, attempt: int) -> None:
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


def _ledger_record(cur, *, target, batch_id, attempt, rows, replaced) -> None:
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


def _drop_leftover_stages(cur, *, schema: str, prefix: str, attempt: int = 0) -> None:
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
        cur.execute(f"DROP TABLE IF EXISTS {_q(schema)}.{_q(name)}")


# ---- copy ----------------------------------------------------------------------------------------


def _as_text(df: DataFrame) -> DataFrame:
    """Every column as the text PostgreSQL parses back to the same value (nulls stay null)."""
    converted = []
    for f in df.schema.fields:
        col = df[f.name]
        t = f.dataType
        if isinstance(t, T.TimestampNTZType):
            col = F.date_format(col, "yyyy-MM-dd HH:mm:ss.SSSSSS")
        elif isinstance(t, T.TimestampType):
            col = F.date_format(col, "yyyy-MM-dd HH:mm:ss.SSSSSSxxx")
        elif isinstance(t, T.BinaryType):
            col = F.concat(F.lit("\\x"), F.hex(col))
        elif isinstance(t, T.ArrayType | T.MapType | T.StructType):
            col = F.to_json(col)
        else:
            col = col.cast("string")
        converted.append(col.alias(f.name))
    return df.select(*converted)


def _partition_copier(dsn: str, stage: str, columns: list[str]):
    """The function each executor runs on its partition.

    Built as a closure so Spark ships it by value: executors need psycopg2, not this project.
    """
    column_list = ", ".join(_q(c) for c in columns + ["_tm_part"])
    copy_sql = f"COPY {stage} ({column_list}) FROM STDIN WITH (FORMAT csv)"
    delete_sql = f"DELETE FROM {stage} WHERE _tm_part = %s"

    def copy_partition(rows) -> None:
        import io

        import psycopg2
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        conn = None
        buffer = io.StringIO()

        def flush():
            nonlocal conn, buffer
            if conn is None:
                conn = psycopg2.connect(dsn)
                conn.cursor().execute(delete_sql, [part])
            buffer.seek(0)
            conn.cursor().copy_expert(copy_sql, buffer)
            buffer = io.StringIO()

        try:
            for row in rows:
                # CSV: an unquoted empty field is NULL, a quoted one the empty string
                fields = ["" if v is None else '"' + v.replace('"', '""') + '"' for v in row]
                fields.append(str(part))
                buffer.write(",".join(fields))
                buffer.write("\n")
                if buffer.tell() >= _COPY_CHUNK_CHARS:
                    flush()
            if buffer.tell():
                flush()
            if conn is not None:
                conn.commit()
        finally:
            if conn is not None:
                conn.close()

    return copy_partition


# ---- merge ---------------------------------------------------------------------------------------


def _merge(
    cur,
    *,
    target: str,
    stage: str,
    columns: list[str],
    key: list[str],
    mode: str,
    order_by: str | None,
    batch_id: int,
    replaced: list[int] = (),
    version_column: str | None = None,
    version: int | None = None,
    target_name: str = "",
) -> tuple[int, int]:
    """Merge the staging table into the target in the caller's transaction.

    Returns (rows staged, rows inserted or changed in the target).
    """
    cur.execute(f"SELECT count(*) FROM {stage}")
    rows_out = cur.fetchone()[0]
    quoted = ", ".join(_q(c) for c in columns)
    keys = ", ".join(_q(k) for k in key)

    if mode == "append":
        # a rerun or a replacing batch first removes the rows it rewrites
        cur.execute(
            f"DELETE FROM {target} WHERE {_q(BATCH_COLUMN)} = ANY(%s)",
            [[int(batch_id), *(int(i) for i in replaced)]],
        )
        if BATCH_COLUMN in columns:
            cur.execute(f"INSERT INTO {target} ({quoted}) SELECT {quoted} FROM {stage}")
        else:
            cur.execute(
                f"INSERT INTO {target} ({quoted}, {_q(BATCH_COLUMN)}) "
                f"SELECT {quoted}, %s FROM {stage}",
                [int(batch_id)],
            )
        return rows_out, cur.rowcount

    if order_by is not None:
        source = (
            f"SELECT DISTINCT ON ({keys}) {quoted} FROM {stage} "
            f"ORDER BY {keys}, {_q(order_by)} DESC NULLS LAST"
        )
    else:
        cur.execute(f"SELECT {keys} FROM {stage} GROUP BY {keys} HAVING count(*) > 1 LIMIT 1")
        duplicate = cur.fetchone()
        if duplicate is not None:
            shown = dict(zip(key, duplicate, strict=True))
            raise SinkError(
                f"the batch has several rows for key {shown}; {mode} needs one row per key "
                "(aggregate in the processor or set sink 'order_by' to keep the latest)"
            )
        source = f"SELECT {quoted} FROM {stage}"

    others = [c for c in columns if c not in key]
    if mode == "upsert":
        new_values = [f"EXCLUDED.{_q(c)}" for c in others]
    else:
        new_values = [f"COALESCE(EXCLUDED.{_q(c)}, t.{_q(c)})" for c in others]
    params: list = []
    prefix = ""
    guard = "true"
    if version_column is not None:
        # a declared version: an older row never overwrites a newer one
        vc = _q(version_column)
        guard = f"(t.{vc} IS NULL OR EXCLUDED.{vc} IS NOT NULL AND EXCLUDED.{vc} >= t.{vc})"
    elif version is not None:
        # the batch's source order as the version, kept per key beside the table: only keys
        # whose stored version is not newer pass on to the merge
        key_json = f"jsonb_build_array({', '.join(f's.{_q(k)}' for k in key)})"
        # (a data-modifying WITH must lead the statement)
        prefix = (
            f"WITH src AS ({source}), passed AS ("
            f"INSERT INTO {KEY_VERSIONS} AS kv (target, key, version) "
            f"SELECT %s, {key_json}, %s FROM src AS s "
            "ON CONFLICT (target, key) DO UPDATE SET version = EXCLUDED.version "
            "WHERE EXCLUDED.version >= kv.version RETURNING kv.key) "
        )
        source = (
            f"SELECT {', '.join(f's.{_q(c)}' for c in columns)} FROM src AS s "
            f"WHERE {key_json} IN (SELECT key FROM passed)"
        )
        params = [target_name, int(version)]
    if not others:
        cur.execute(
            f"{prefix}INSERT INTO {target} ({quoted}) {source} ON CONFLICT ({keys}) DO NOTHING",
            params,
        )
        return rows_out, cur.rowcount
    assignments = ", ".join(f"{_q(c)} = {v}" for c, v in zip(others, new_values, strict=True))
    stored = ", ".join(f"t.{_q(c)}" for c in others)
    cur.execute(
        f"{prefix}INSERT INTO {target} AS t ({quoted}) {source} "
        f"ON CONFLICT ({keys}) DO UPDATE SET {assignments} "
        # unchanged rows are left alone: a rerun writes nothing
        f"WHERE {guard} AND ROW({stored}) IS DISTINCT FROM ROW({', '.join(new_values)})",
        params,
    )
    return rows_out, cur.rowcount
