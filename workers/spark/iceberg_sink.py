"""The Iceberg sink: Spark's executors write a batch's Parquet files, one catalog commit adds them.

sink = {"kind": "iceberg", "catalog_uri": "sqlite:////data/iceberg/catalog.db",
        "warehouse": "/data/iceberg/warehouse", "table": "sales.orders",
        "mode": "append" | "upsert", "key": [...], "version_column": optional}

1. The executors write the batch's output as Parquet (timestamps as microseconds, UTC: the
   session's `spark.sql.parquet.outputTimestampType`) under a prefix of its own in the table's
   data folder, `data/tidemark-b<batch>-a<attempt>-<token>/`. No snapshot names these files yet.
2. Inside the publish fence (workers/spark/fence.py), ONE catalog commit makes one snapshot:
   - `append`: the new files in, and out every file of the same batch's earlier attempts and of
     the batches the fence says this one replaces (a retry, a replay, a backfill);
   - `upsert`: the table's files holding a key of the batch are rewritten on the executors
     (inside the fence, from the snapshot being replaced): a stored row whose version is newer
     than the batch's stays, every other is replaced by the batch's row. The rewritten files
     replace the old ones in the same snapshot, so each key is in the table once.
   A reader of any snapshot sees each row once: the old output or the new one, never both.
3. The snapshot's summary carries `tidemark.job`, `tidemark.batch`, `tidemark.attempt` and
   `tidemark.token` (the fence's publish token, growing in publish order). A commit whose token
   is not above the latest the table holds for the job is refused (FencedOut), and the catalog's
   own compare-and-swap (the commit asserts the snapshot it was built on) makes a concurrent
   commit lose and check again, so a stale attempt whose fence is gone cannot commit after a
   newer one, and the same publish cannot commit twice.

If the fence fails after the catalog commit, a second snapshot puts the files back as they
were, when nobody committed since; otherwise the batch's next attempt replaces the output anyway.
"""

import logging
import os
import re
import shutil
import uuid

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from workers.spark.errors import SinkError, spark_error_summary
from workers.spark.fence import FencedOut, Publish, static_publish
from workers.spark.iceberg_catalog import CatalogConfig, CatalogError, catalog_from, check_catalog
from workers.spark.iceberg_prune import key_ranges, may_hold

log = logging.getLogger(__name__)

MODES = ("append", "upsert")
COMMIT_TRIES = 5
# the batch's source order, stored per row by an upsert sink without a `version_column`
VERSION_COLUMN = "_tm_version"
KEYS = ("kind", "catalog_uri", "catalog_dsn_env", "warehouse", "table", "mode", "key")
KEYS += ("version_column",)
_OWNED = re.compile(r"/data/tidemark-b(?P<batch>\d+)-a(?P<attempt>\d+)-[0-9a-f]+(?:-m)?/")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME_MAPPING = "schema.name-mapping.default"
_RETRIES = "commit.retry.num-retries"


def check_iceberg(sink: dict) -> tuple[CatalogConfig, str, list[str], str | None]:
    """(catalog, mode, key, version column) of a valid Iceberg sink; SinkError naming the key."""
    try:
        catalog = check_catalog(sink)
    except CatalogError as exc:
        raise _field(exc.field, f"sink {exc}") from None
    mode = sink.get("mode", "append")
    if mode not in MODES:
        raise _field("mode", f"sink 'mode' must be one of {', '.join(MODES)}, got {mode!r}")
    key = sink.get("key")
    version_column = sink.get("version_column")
    if mode == "upsert":
        if (
            not isinstance(key, list)
            or not key
            or not all(isinstance(c, str) and _IDENT.fullmatch(c) for c in key)
        ):
            raise _field("key", "sink 'key' must list the key columns an upsert merges on")
        if version_column is not None and (
            not isinstance(version_column, str)
            or not _IDENT.fullmatch(version_column)
            or version_column in key
        ):
            raise _field(
                "version_column", "sink 'version_column' must name one column outside the key"
            )
    else:
        for name, value in (("key", key), ("version_column", version_column)):
            if value is not None:
                raise _field(name, f"sink '{name}' is read by the upsert mode only")
    unknown = set(sink) - set(KEYS)
    if unknown:
        raise SinkError(
            f"sink has unknown keys for an iceberg sink: {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(KEYS[1:])}"
        )
    return catalog, mode, list(key or []), version_column


def _field(key: str, message: str) -> SinkError:
    error = SinkError(message)
    error.field = key
    return error


def write_iceberg(
    df: DataFrame,
    sink: dict,
    *,
    batch_id: int,
    job: str,
    attempt: int = 0,
    publish: Publish | None = None,
    version: int | None = None,
    own_database: list[str] | None = None,
) -> dict:
    config, mode, key, version_column = check_iceberg(sink)
    publish = publish or static_publish()
    if mode == "upsert":
        missing = [
            c for c in [*key, *([version_column] if version_column else [])] if c not in df.columns
        ]
        if missing:
            raise SinkError(f"sink 'key'/'version_column' name columns {missing} the output lacks")
        if version_column is None:
            if VERSION_COLUMN in df.columns:
                raise SinkError(f"the output has a column {VERSION_COLUMN!r}, the sink's own")
            df = df.withColumn(VERSION_COLUMN, F.lit(int(version or 0)).cast("bigint"))
            version_column = VERSION_COLUMN
    catalog = catalog_from(config, own_database=own_database)
    table = _table(catalog, config, df)
    root = _local(table.location())

    prefix = f"tidemark-b{int(batch_id)}-a{int(attempt)}-{uuid.uuid4().hex[:12]}"
    staging = os.path.join(root, "data", prefix)
    written = [staging]
    try:
        df.write.mode("errorifexists").parquet(staging)
    except Exception as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SinkError(
            f"writing the Iceberg table's files under {root} failed: {spark_error_summary(exc)}"
        ) from exc

    committed = None
    info = {"job": job, "batch": int(batch_id), "attempt": int(attempt)}
    try:
        with publish() as replaced:
            token = getattr(replaced, "token", None)
            owners = {int(batch_id), *(int(i) for i in replaced)}
            committed = _commit(
                catalog,
                config,
                staging=staging,
                owners=owners,
                info=info,
                token=token,
                merge=(
                    {
                        "spark": df.sparkSession,
                        "key": key,
                        "version": version_column,
                        "out": written,
                    }
                    if mode == "upsert"
                    else None
                ),
            )
    except BaseException:
        if committed is not None:
            _revert(catalog, config, committed, info)
        else:
            for path in written:
                shutil.rmtree(path, ignore_errors=True)
        raise
    if mode == "upsert":
        # the batch's own rows were merged into the rewritten files: no snapshot names these
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "rows_out": committed["rows_out"],
        "bytes": sum(f.file_size_in_bytes for f in committed["adds"]),
        "location": root,
        "iceberg_table": _name(config),
        "iceberg_snapshot": committed["snapshot_id"],
    }


def _local(location: str) -> str:
    return "/" + location[len("file:") :].lstrip("/") if location.startswith("file:") else location


def _table(catalog, config: CatalogConfig, df: DataFrame):
    """The sink's table, created with the output's schema on first use; the output must match it
    and the table must live inside the sink's warehouse."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    schema = _iceberg_schema(df)
    try:
        catalog.create_namespace_if_not_exists(config.namespace)
        try:
            table = catalog.load_table(config.identifier)
        except NoSuchTableError:
            try:
                # the files Spark writes carry no field ids: readers map columns by name
                mapping = schema.name_mapping.model_dump_json()
                table = catalog.create_table(
                    config.identifier,
                    schema=schema,
                    properties={_NAME_MAPPING: mapping, _RETRIES: "0"},
                )
            except TableAlreadyExistsError:
                table = catalog.load_table(config.identifier)
        if table.properties.get(_RETRIES) != "0":
            # pyiceberg would otherwise redo a commit that lost the catalog's swap on top of the
            # new snapshot, past the token check: the sink checks again and retries itself
            with table.transaction() as tx:
                tx.set_properties(**{_RETRIES: "0"})
            table = catalog.load_table(config.identifier)
    except Exception as exc:  # noqa: BLE001 - the catalog's database or the warehouse
        raise SinkError(f"cannot open the Iceberg table {_name(config)}: {exc}") from exc
    root = os.path.realpath(_local(table.location()))
    warehouse = os.path.realpath(config.warehouse)
    if not (root + os.sep).startswith(warehouse.rstrip(os.sep) + os.sep):
        raise SinkError(
            f"the Iceberg table {_name(config)} lives at {table.location()}, outside the sink's "
            f"warehouse {config.warehouse}: Tidemark writes only inside the warehouse"
        )
    if _NAME_MAPPING not in table.properties:
        raise SinkError(
            f"the Iceberg table {_name(config)} has no name mapping ({_NAME_MAPPING}), which the "
            "files Spark writes need: set it, or let the sink create the table"
        )
    have = {f.name: str(f.field_type) for f in table.schema().fields}
    want = {f.name: str(f.field_type) for f in schema.fields}
    if have != want:
        differing = sorted(n for n in set(have) | set(want) if have.get(n) != want.get(n))
        raise SinkError(
            "the output's columns differ from the Iceberg table's schema in "
            f"{', '.join(differing)}: Tidemark does not change an Iceberg table's schema"
        )
    return table


def _iceberg_schema(df: DataFrame):
    """The output's schema as Iceberg's, ids as a new table would number them."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructField, StructType

    # every column optional: a rewritten (upsert) file's columns come out of an outer join
    nullable = StructType([StructField(f.name, f.dataType, True) for f in df.schema.fields])
    try:
        return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(to_arrow_schema(nullable)))
    except Exception as exc:  # noqa: BLE001 - a type Arrow (so Iceberg) cannot hold
        raise SinkError(f"the output's schema cannot be written to Iceberg: {exc}") from exc


def _name(config: CatalogConfig) -> str:
    return f"{config.namespace}.{config.name}"


def _data_files(table, directory: str) -> list:
    """One Iceberg data file per Parquet file under `directory` (markers and empty files skipped),
    described from its footer on the driver (the rows stay on the executors' disks)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    files = []
    for name in sorted(os.listdir(directory)):
        if name.startswith((".", "_")) or not name.endswith(".parquet"):
            continue
        path = os.path.join(directory, name)
        if pq.read_metadata(path).num_rows == 0:
            continue
        try:
            files.append(parquet_file_to_data_file(table.io, table.metadata, "file://" + path))
        except Exception as exc:  # noqa: BLE001 - e.g. INT96 or nanosecond timestamps
            hint = ""
            if "timestamp" in str(exc).lower():
                hint = (
                    " (timestamps must be written as microseconds: "
                    "spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS)"
                )
            raise SinkError(
                f"the file {path} Spark wrote cannot be added to the Iceberg table: {exc}{hint}"
            ) from exc
    return files


def latest_token(table, job: str) -> int | None:
    """The publish token of the table's latest snapshot written for `job` (on the main branch)."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if props.get("tidemark.job") == job and props.get("tidemark.token") is not None:
            return int(props["tidemark.token"])
    return None


def _live_files(table) -> list:
    if table.current_snapshot() is None:
        return []
    return [task.file for task in table.scan().plan_files()]


def _commit(catalog, config, *, staging, owners, info, token, merge) -> dict:
    """One snapshot: the new files in, the replaced ones out, the token checked and recorded.
    Returns what `_revert` needs to undo it."""
    from pyiceberg.exceptions import CommitFailedException

    job = info["job"]
    for _ in range(COMMIT_TRIES):
        table = catalog.load_table(config.identifier)
        recorded = latest_token(table, job)
        this = token if token is not None else (0 if recorded is None else recorded + 1)
        if token is not None and recorded is not None and this <= recorded:
            raise FencedOut(
                f"the Iceberg table {_name(config)} already holds a later publish of this job "
                f"(token {recorded} >= {this}): this attempt may not commit"
            )
        live = _live_files(table)
        if merge is None:
            adds = _data_files(table, staging)
            owners = _with_restored(table, job, owners)
            removes = [f for f in live if _owner(f.file_path) in owners]
            rows_out = sum(f.record_count for f in adds)
        else:
            adds, removes, rows_out = _merge(table, staging, live, merge)
        properties = {
            "tidemark.job": job,
            "tidemark.batch": str(info["batch"]),
            "tidemark.attempt": str(info["attempt"]),
            "tidemark.token": str(this),
            "tidemark.replaced": ",".join(str(i) for i in sorted(owners - {info["batch"]})),
        }
        try:
            snapshot_id = _snapshot(table, adds, removes, properties)
        except CommitFailedException:
            continue  # another writer committed first: check again on top of its snapshot
        except Exception as exc:  # noqa: BLE001
            raise SinkError(
                f"committing to the Iceberg table {_name(config)} failed: {exc}"
            ) from exc
        return {
            "snapshot_id": snapshot_id,
            "adds": adds,
            "removes": removes,
            "rows_out": rows_out,
        }
    raise SinkError(f"committing to the Iceberg table {_name(config)} kept losing to other writers")


def _with_restored(table, job: str, owners: set[int]) -> set[int]:
    """`owners` and the batches whose files an undo snapshot (`_revert`) of one of theirs put
    back, transitively. The fence may have recorded the undone publish after all (its answer lost
    after COMMIT): the control plane then counts the put-back output as replaced by the undone
    batch and never names it again, so whoever replaces that batch removes those files too."""
    from pyiceberg.table.snapshots import ancestors_of

    restored: dict[int, set[int]] = {}
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if props.get("tidemark.reverted-job") == job and props.get("tidemark.restored"):
            batch = int(props["tidemark.reverted-batch"])
            restored.setdefault(batch, set()).update(
                int(i) for i in props["tidemark.restored"].split(",")
            )
    found, todo = set(owners), list(owners)
    while todo:
        for owner in restored.get(todo.pop(), ()):
            if owner not in found:
                found.add(owner)
                todo.append(owner)
    return found


def _owner(path: str) -> int | None:
    match = _OWNED.search(path)
    return int(match["batch"]) if match else None


def _snapshot(table, adds, removes, properties) -> int:
    """ONE snapshot: an append when nothing leaves, an overwrite otherwise."""
    with table.transaction() as tx:
        update = tx.update_snapshot(snapshot_properties=properties)
        producer = update.overwrite() if removes else update.fast_append()
        with producer as step:
            for data_file in removes:
                step.delete_data_file(data_file)
            for data_file in adds:
                step.append_data_file(data_file)
    return table.current_snapshot().snapshot_id


def _merge(table, staging, live, merge) -> tuple[list, list, int]:
    """Upsert, on the executors: the live files holding a key of the batch are rewritten with,
    per key, the newer of the stored row and the batch's row (the batch's on a tie). Only the
    files whose key bounds admit one of the batch's keys are read (workers/spark/iceberg_prune)."""
    spark, key, version = merge["spark"], merge["key"], merge["version"]
    new = spark.read.parquet(staging)
    rows_out = new.count()
    ranked = new.withColumn(
        "_tm_rank", F.row_number().over(Window.partitionBy(*key).orderBy(F.col(version).desc()))
    )
    ties = (
        new.groupBy(*key, version).count().where(F.col("count") > 1).limit(1).collect()
        if rows_out
        else []
    )
    if ties:
        raise SinkError(
            f"the batch's output holds key {[ties[0][k] for k in key]} twice with the same "
            f"{version}: an upsert cannot tell which row wins (aggregate in the processor, or "
            "declare a version_column that differs)"
        )
    newest = ranked.where(F.col("_tm_rank") == 1).drop("_tm_rank")
    columns = new.columns
    schema = table.schema()
    ranges = key_ranges(newest, key, schema) if live else None
    paths = {f.file_path: f for f in live if ranges is not None and may_hold(f, ranges, schema)}
    touched = []
    if paths:
        stored = spark.read.parquet(*(_local(p) for p in paths)).withColumn(
            "_tm_file", F.input_file_name()
        )
        hit = stored.join(newest.select(*key), on=key, how="left_semi")
        touched_names = {row[0] for row in hit.select("_tm_file").distinct().collect()}
        touched = [f for p, f in paths.items() if _same_file(p, touched_names)]
    if touched:
        old = spark.read.parquet(*(_local(f.file_path) for f in touched))
        n, o = newest.alias("n"), old.alias("o")
        condition = [F.col(f"n.{k}") == F.col(f"o.{k}") for k in key]
        joined = n.join(o, condition, "full_outer")
        new_wins = F.col(f"o.{key[0]}").isNull() | (
            F.col(f"n.{key[0]}").isNotNull() & (F.col(f"n.{version}") >= F.col(f"o.{version}"))
        )
        result = joined.select(
            *(
                F.when(new_wins, F.col(f"n.{c}")).otherwise(F.col(f"o.{c}")).alias(c)
                for c in columns
            )
        )
    else:
        result = newest
    merged = staging + "-m"
    merge["out"].append(merged)
    try:
        result.write.mode("errorifexists").parquet(merged)
    except Exception as exc:
        shutil.rmtree(merged, ignore_errors=True)
        raise SinkError(
            f"merging the batch into the Iceberg table failed: {spark_error_summary(exc)}"
        ) from exc
    return _data_files(table, merged), touched, rows_out


def _same_file(path: str, names: set[str]) -> bool:
    local = _local(path)
    return any(_local(n) == local for n in names)


def _revert(catalog, config, committed: dict, info: dict) -> None:
    """The fence failed after the catalog commit: undo its snapshot, if it is still the latest.
    The undo snapshot names the batch and the owners of the files it put back
    (`tidemark.restored`): if the fence recorded the publish after all, a later publish that
    replaces this batch removes them too (`_with_restored`)."""
    try:
        table = catalog.load_table(config.identifier)
        current = table.current_snapshot()
        if current is None or current.snapshot_id != committed["snapshot_id"]:
            return  # someone committed since: the batch's next attempt replaces the output
        added = {f.file_path for f in committed["adds"]}
        # the files as the table's manifests describe them: what an overwrite can delete
        undo = [f for f in _live_files(table) if f.file_path in added]
        restored = {_owner(f.file_path) for f in committed["removes"]} - {None}
        _snapshot(
            table,
            committed["removes"],
            undo,
            {
                "tidemark.reverted-snapshot": str(committed["snapshot_id"]),
                "tidemark.reverted-job": info["job"],
                "tidemark.reverted-batch": str(info["batch"]),
                "tidemark.restored": ",".join(str(i) for i in sorted(restored)),
            },
        )
    except Exception as exc:  # noqa: BLE001 - best effort: the next attempt replaces the output
        log.warning("could not undo Iceberg snapshot %s: %s", committed["snapshot_id"], exc)
