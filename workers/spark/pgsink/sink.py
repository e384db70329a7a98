"""The sink's two entries: checking a sink's configuration before any work, and writing a batch
(stage, then merge inside the publish fence)."""

import hashlib
import logging
import uuid

from pyspark.sql import DataFrame

from workers.spark.errors import SinkError, scrub_dsn, spark_error_detail, spark_error_summary
from workers.spark.fence import Publish, static_publish
from workers.spark.pgsink.config import (
    dsn_of,
    key_of,
    mode_of,
    quote_ident,
    refuse_own_database,
    table_name_of,
    valid_identifier,
)
from workers.spark.pgsink.merge import merge_stage
from workers.spark.pgsink.staging import copy_to_stage
from workers.spark.pgsink.target import (
    drop_leftover_stages,
    ensure_target,
    ledger_claim,
    ledger_record,
)

log = logging.getLogger(__name__)


def check_postgres(sink: dict) -> None:
    """Validate the config alone (no database, no DataFrame)."""
    table_name_of(sink.get("table"))
    mode = mode_of(sink)
    key = key_of(sink.get("key"), mode=mode, columns=None)
    for name in key:
        valid_identifier(name, "sink key column", field="key")
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

    schema, table = table_name_of(sink.get("table"))
    mode = mode_of(sink)
    columns = list(df.columns)
    for name in columns:
        valid_identifier(name, "output column")
    key = key_of(sink.get("key"), mode=mode, columns=columns)
    order_by = sink.get("order_by")
    if order_by is not None and order_by not in columns:
        raise SinkError(f"sink 'order_by' must name an output column, got {order_by!r}")
    version_column = sink.get("version_column")
    if version_column is not None and (version_column not in columns or version_column in key):
        raise SinkError(
            f"sink 'version_column' must name an output column outside the key, "
            f"got {version_column!r}"
        )
    dsn = dsn_of(sink)
    publish = publish or static_publish()

    target = f"{quote_ident(schema)}.{quote_ident(table)}"
    digest = hashlib.md5(f"{schema}.{table}".encode()).hexdigest()[:8]
    stage_prefix = f"_tm_stage_{digest}_{int(batch_id)}_"
    stage_name = f"{stage_prefix}a{int(attempt)}_{uuid.uuid4().hex[:12]}"
    stage = f"{quote_ident(schema)}.{quote_ident(stage_name)}"
    quoted = ", ".join(quote_ident(c) for c in columns)

    try:
        conn = psycopg2.connect(dsn)
    except psycopg2.Error as exc:
        raise SinkError(f"cannot connect to the sink database: {scrub_dsn(exc, dsn)}") from None
    try:
        refuse_own_database(conn, own_database, dsn)
        try:
            with conn, conn.cursor() as cur:
                ensure_target(
                    cur,
                    df,
                    schema=schema,
                    table=table,
                    key=key,
                    mode=mode,
                    version_column=version_column,
                )
                drop_leftover_stages(cur, schema=schema, prefix=stage_prefix, attempt=attempt)
                cur.execute(
                    f"CREATE UNLOGGED TABLE {stage} AS SELECT {quoted}, NULL::integer AS _tm_part "
                    f"FROM {target} WITH NO DATA"
                )
        except psycopg2.Error as exc:
            raise SinkError(f"preparing {schema}.{table} failed: {scrub_dsn(exc, dsn)}") from None
        try:
            observed = copy_to_stage(df, dsn, stage, columns)
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
                ledger_claim(
                    cur,
                    target=f"{schema}.{table}",
                    batch_id=batch_id,
                    attempt=attempt,
                )
                rows_out, changed = merge_stage(
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
                ledger_record(
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
        # the input's observed metrics, if any (run.py takes them out of the result): staging.py
        **({"observed": observed} if observed else {}),
    }
