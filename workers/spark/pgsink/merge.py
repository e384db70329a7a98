"""The merging transaction by mode: append replaces a batch's rows, upsert and coalesce keep the
newest version of each key."""

from workers.spark.errors import SinkError
from workers.spark.pgsink.config import quote_ident
from workers.spark.pgsink.target import BATCH_COLUMN, KEY_VERSIONS


def merge_stage(
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
    quoted = ", ".join(quote_ident(c) for c in columns)
    keys = ", ".join(quote_ident(k) for k in key)

    if mode == "append":
        # a rerun or a replacing batch first removes the rows it rewrites
        cur.execute(
            f"DELETE FROM {target} WHERE {quote_ident(BATCH_COLUMN)} = ANY(%s)",
            [[int(batch_id), *(int(i) for i in replaced)]],
        )
        if BATCH_COLUMN in columns:
            cur.execute(f"INSERT INTO {target} ({quoted}) SELECT {quoted} FROM {stage}")
        else:
            cur.execute(
                f"INSERT INTO {target} ({quoted}, {quote_ident(BATCH_COLUMN)}) "
                f"SELECT {quoted}, %s FROM {stage}",
                [int(batch_id)],
            )
        return rows_out, cur.rowcount

    if order_by is not None:
        source = (
            f"SELECT DISTINCT ON ({keys}) {quoted} FROM {stage} "
            f"ORDER BY {keys}, {quote_ident(order_by)} DESC NULLS LAST"
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
        new_values = [f"EXCLUDED.{quote_ident(c)}" for c in others]
    else:
        new_values = [f"COALESCE(EXCLUDED.{quote_ident(c)}, t.{quote_ident(c)})" for c in others]
    params: list = []
    prefix = ""
    guard = "true"
    if version_column is not None:
        # a declared version: an older row never overwrites a newer one
        vc = quote_ident(version_column)
        guard = f"(t.{vc} IS NULL OR EXCLUDED.{vc} IS NOT NULL AND EXCLUDED.{vc} >= t.{vc})"
    elif version is not None:
        # the batch's source order as the version, kept per key beside the table: only keys
        # whose stored version is not newer pass on to the merge
        key_json = f"jsonb_build_array({', '.join(f's.{quote_ident(k)}' for k in key)})"
        # (a data-modifying WITH must lead the statement)
        prefix = (
            f"WITH src AS ({source}), passed AS ("
            f"INSERT INTO {KEY_VERSIONS} AS kv (target, key, version) "
            f"SELECT %s, {key_json}, %s FROM src AS s "
            "ON CONFLICT (target, key) DO UPDATE SET version = EXCLUDED.version "
            "WHERE EXCLUDED.version >= kv.version RETURNING kv.key) "
        )
        source = (
            f"SELECT {', '.join(f's.{quote_ident(c)}' for c in columns)} FROM src AS s "
            f"WHERE {key_json} IN (SELECT key FROM passed)"
        )
        params = [target_name, int(version)]
    if not others:
        cur.execute(
            f"{prefix}INSERT INTO {target} ({quoted}) {source} ON CONFLICT ({keys}) DO NOTHING",
            params,
        )
        return rows_out, cur.rowcount
    assignments = ", ".join(
        f"{quote_ident(c)} = {v}" for c, v in zip(others, new_values, strict=True)
    )
    stored = ", ".join(f"t.{quote_ident(c)}" for c in others)
    cur.execute(
        f"{prefix}INSERT INTO {target} AS t ({quoted}) {source} "
        f"ON CONFLICT ({keys}) DO UPDATE SET {assignments} "
        # unchanged rows are left alone: a rerun writes nothing
        f"WHERE {guard} AND ROW({stored}) IS DISTINCT FROM ROW({', '.join(new_values)})",
        params,
    )
    return rows_out, cur.rowcount
