"""The merging transaction by mode: append replaces a batch's rows, upsert and coalesce keep the
newest version of each key."""

from workers.spark.errors import SinkError
from workers.spark.pgsink.config import quote_ident
from workers.spark.pgsink.target import BATCH_COLUMN, COLUMN_VERSIONS, KEY_VERSIONS


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
        # the column is Tidemark's: it always names the batch writing the row, also when the
        # output carries one of its own (an upstream job's lineage, passed through), else a rerun
        # would not find the rows it replaces, and another batch would delete them
        own = [c for c in columns if c != BATCH_COLUMN]
        names = ", ".join(quote_ident(c) for c in [*own, BATCH_COLUMN])
        values = ", ".join([*(quote_ident(c) for c in own), "%s"])
        cur.execute(f"INSERT INTO {target} ({names}) SELECT {values} FROM {stage}", [int(batch_id)])
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
    if mode == "coalesce" and version_column is None and version is not None and others:
        return rows_out, _coalesce_by_column_version(
            cur,
            target=target,
            source=source,
            key=key,
            others=others,
            version=int(version),
            target_name=target_name,
        )
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


def _coalesce_by_column_version(
    cur,
    *,
    target: str,
    source: str,
    key: list[str],
    others: list[str],
    version: int,
    target_name: str,
) -> int:
    """Coalesce when batches may merge out of source order: each column keeps the value of the
    newest version that had it non-null. A partial update (null in a column) merged before an
    older batch that has the column set must not lose that older value, and an older value must
    never replace a newer one: so every stored non-null value carries its own source version
    (`column_versions`; a value stored before that table existed counts with its key's version).
    Merges into one target are serialized (they read, then write, the same keys)."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"tidemark.sink.merge:{target}"])
    keys = ", ".join(quote_ident(k) for k in key)
    joined = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)
    key_json = f"jsonb_build_array({', '.join(f's.{quote_ident(k)}' for k in key)})"

    # column names travel as bound parameters where they are values (the jsonb keys)
    params = {"v": version, "target": target_name}
    params.update({f"c{n}": c for n, c in enumerate(others)})
    name = {c: f"%(c{n})s" for n, c in enumerate(others)}

    def stored_version(c: str) -> str:
        # a null stored value has no version (any non-null value fills it); a value stored
        # before column versions were kept counts with its key's version
        return (
            f"CASE WHEN t.{quote_ident(c)} IS NULL THEN -1 "
            f"ELSE coalesce((cv.versions ->> {name[c]})::bigint, kv.version, -1) END"
        )

    def wins(c: str) -> str:
        # a non-null incoming value at least as new as the stored one's
        return f"(s.{quote_ident(c)} IS NOT NULL AND {stored_version(c)} <= %(v)s)"

    merged = ", ".join(
        f"CASE WHEN {wins(c)} THEN s.{quote_ident(c)} ELSE t.{quote_ident(c)} END AS {quote_ident(c)}"
        for c in others
    )
    versions = ", ".join(
        f"{name[c]}::text, CASE WHEN {wins(c)} THEN %(v)s "
        f"WHEN t.{quote_ident(c)} IS NULL THEN NULL ELSE {stored_version(c)} END"
        for c in others
    )
    cur.execute("DROP TABLE IF EXISTS pg_temp._tm_coalesce")
    cur.execute(
        "CREATE TEMP TABLE _tm_coalesce ON COMMIT DROP AS "
        f"SELECT {', '.join(f's.{quote_ident(k)}' for k in key)}, {merged}, "
        f"{key_json} AS _tm_key, jsonb_strip_nulls(jsonb_build_object({versions})) AS _tm_versions "
        f"FROM ({source}) AS s LEFT JOIN {target} AS t ON {joined} "
        f"LEFT JOIN {KEY_VERSIONS} AS kv ON kv.target = %(target)s AND kv.key = {key_json} "
        f"LEFT JOIN {COLUMN_VERSIONS} AS cv ON cv.target = %(target)s AND cv.key = {key_json}",
        params,
    )
    columns = [*key, *others]
    quoted = ", ".join(quote_ident(c) for c in columns)
    assignments = ", ".join(f"{quote_ident(c)} = EXCLUDED.{quote_ident(c)}" for c in others)
    stored = ", ".join(f"t.{quote_ident(c)}" for c in others)
    excluded = ", ".join(f"EXCLUDED.{quote_ident(c)}" for c in others)
    cur.execute(
        f"INSERT INTO {target} AS t ({quoted}) SELECT {quoted} FROM _tm_coalesce "
        f"ON CONFLICT ({keys}) DO UPDATE SET {assignments} "
        # unchanged rows are left alone: a rerun writes nothing
        f"WHERE ROW({stored}) IS DISTINCT FROM ROW({excluded})"
    )
    changed = cur.rowcount
    cur.execute(
        f"INSERT INTO {COLUMN_VERSIONS} AS cv (target, key, versions) "
        "SELECT %s, _tm_key, _tm_versions FROM _tm_coalesce "
        "ON CONFLICT (target, key) DO UPDATE SET versions = EXCLUDED.versions "
        "WHERE cv.versions IS DISTINCT FROM EXCLUDED.versions",
        [target_name],
    )
    cur.execute(
        f"INSERT INTO {KEY_VERSIONS} AS kv (target, key, version) "
        "SELECT %s, _tm_key, %s FROM _tm_coalesce "
        "ON CONFLICT (target, key) DO UPDATE SET version = EXCLUDED.version "
        "WHERE EXCLUDED.version > kv.version",
        [target_name, version],
    )
    cur.execute("DROP TABLE pg_temp._tm_coalesce")
    return changed
