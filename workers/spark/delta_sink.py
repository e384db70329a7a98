"""The Delta Lake sink: Spark's executors write a batch's Parquet files, delta-rs commits them.

sink = {"kind": "delta", "path": "/data/orders", "mode": "append", "partition_by": ["day"]}

1. The executors write the batch's output as Parquet under a prefix of its own inside the table
   root, `tidemark-b<batch>-a<attempt>-<token>/` (partition directories below it). Nothing in
   the Delta log names these files yet, so no reader sees them.
2. Inside the publish fence (workers/spark/fence.py), ONE Delta commit adds them and removes
   every file of the same batch's earlier attempts and of the batches the fence says this one
   replaces (a retry, a replay, a backfill over committed items). A reader of any version sees
   each batch's rows once: either the old output or the new one, never both, never neither.
3. The commit carries an application transaction (`txn`): app id `tidemark:<job>`, version = the
   fence's publish token, which grows with every publish in publish order. A commit whose token
   is not above the table's recorded version for the job is refused, and the commit is made with
   no automatic retry on top of the exact version that was checked, so a stale attempt (its fence
   long gone) cannot commit after a newer one, and the same publish cannot commit twice.

If the fence fails after the Delta commit (the control plane did not record the publish), a
second commit puts the table back as it was, when nobody committed since; otherwise the batch's
next attempt replaces the output anyway. Files no version names any more (a dead attempt's, a
reverted one's, removed ones) stay for time travel until `VACUUM` (docs/sinks/delta.md).
"""

import json
import os
import re
import shutil
import time
import uuid
from urllib.parse import unquote

from pyspark.sql import DataFrame

from workers.spark.errors import SinkError, spark_error_summary
from workers.spark.fence import FencedOut, Publish, static_publish

MODES = ("append",)
COMMIT_TRIES = 5
_OWNED = re.compile(r"^tidemark-b(?P<batch>\d+)-a(?P<attempt>\d+)-[0-9a-f]+/")
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def check_delta(sink: dict, table_path) -> tuple[str, list[str]]:
    """(local table directory, partition columns) of a valid Delta sink; SinkError otherwise.

    `table_path` is the files sink's path check, so a rule on sink paths reaches both kinds."""
    path = table_path(sink)
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    if not path.startswith("/"):
        raise SinkError(
            "sink 'path' of a delta sink must be an absolute local directory (or file: URI); "
            "object stores are not supported yet"
        )
    mode = sink.get("mode", "append")
    if mode not in MODES:
        raise SinkError(
            f"sink 'mode' must be one of {', '.join(MODES)} for a delta sink, got {mode!r} "
            "(a batch's output replaces its earlier attempts' and the outputs it supersedes)"
        )
    partition_by = sink.get("partition_by") or []
    if not isinstance(partition_by, list) or not all(
        isinstance(c, str) and c for c in partition_by
    ):
        raise SinkError("sink 'partition_by' must be a list of column names")
    unknown = set(sink) - {"kind", "path", "mode", "partition_by"}
    if unknown:
        raise SinkError(
            f"sink has unknown keys for a delta sink: {', '.join(sorted(unknown))}; "
            "allowed: path, mode, partition_by"
        )
    return path.rstrip("/") or "/", partition_by


def app_id(job: str) -> str:
    return f"tidemark:{job}"


def write_delta(
    df: DataFrame,
    sink: dict,
    *,
    table_path,
    batch_id: int,
    job: str,
    attempt: int = 0,
    publish: Publish | None = None,
) -> dict:
    root, partition_by = check_delta(sink, table_path)
    missing = [c for c in partition_by if c not in df.columns]
    if missing:
        raise SinkError(f"sink 'partition_by' names columns {missing} that the output lacks")
    publish = publish or static_publish()
    schema = _arrow_schema(df)

    prefix = f"tidemark-b{int(batch_id)}-a{int(attempt)}-{uuid.uuid4().hex[:12]}"
    staging = os.path.join(root, prefix)
    writer = df.write.mode("errorifexists").format("parquet")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        writer.save(staging)
        adds = _add_actions(root, prefix, partition_by)
    except Exception as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SinkError(
            f"writing the Delta table's files under {root} failed: {spark_error_summary(exc)}"
        ) from exc

    committed = None
    try:
        with publish() as replaced:
            committed = _commit(
                root,
                schema=schema,
                partition_by=partition_by,
                adds=adds,
                owners={int(batch_id), *(int(i) for i in replaced)},
                app=app_id(job),
                token=getattr(replaced, "token", None),
                info={"batch_id": int(batch_id), "attempt": int(attempt), "job": job},
            )
    except BaseException:
        if committed is not None:
            _revert(root, committed, schema=schema, partition_by=partition_by)
        else:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return {
        "rows_out": sum(json.loads(a.stats)["numRecords"] for a in adds),
        "bytes": sum(a.size for a in adds),
        "location": root,
        "delta_version": committed["version"],
    }


def _arrow_schema(df: DataFrame):
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(df.schema)
    except Exception as exc:  # noqa: BLE001 - a type Arrow (so Delta) cannot hold
        raise SinkError(f"the output's schema cannot be written to Delta: {exc}") from exc


def _add_actions(root: str, prefix: str, partition_by: list[str]) -> list:
    """One Delta add action per data file Spark wrote under `prefix` (markers skipped)."""
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    adds = []
    for directory, dirs, files in os.walk(os.path.join(root, prefix)):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in sorted(files):
            if name.startswith((".", "_")):
                continue
            full = os.path.join(directory, name)
            rel = os.path.relpath(full, root)
            values = {}
            for part in rel.split(os.sep)[1:-1]:
                column, _, value = part.partition("=")
                value = unquote(value)
                values[unquote(column)] = None if value == _NULL_PARTITION else value
            if sorted(values) != sorted(partition_by):
                raise SinkError(f"unexpected file {rel} in the batch's output")
            stat = os.stat(full)
            rows = pq.read_metadata(full).num_rows
            adds.append(
                AddAction(
                    rel.replace(os.sep, "/"),
                    stat.st_size,
                    values,
                    int(stat.st_mtime * 1000),
                    True,
                    json.dumps({"numRecords": rows}),
                )
            )
    return adds


def _commit(root, *, schema, partition_by, adds, owners, app, token, info) -> dict:
    """One Delta commit: the new files in, every file of `owners` out, the txn recorded.
    Returns what `_revert` needs to undo it."""
    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema
    from deltalake.exceptions import CommitFailedError, TableNotFoundError
    from deltalake.transaction import (
        CommitProperties,
        RemoveAction,
        Transaction,
        create_table_with_add_actions,
    )

    delta_schema = DeltaSchema.from_arrow(schema)
    for _ in range(COMMIT_TRIES):
        try:
            table = DeltaTable(root)
        except TableNotFoundError:
            table = None
        version = token if token is not None else _next_version(table, app)
        properties = CommitProperties(
            custom_metadata={"tidemark": {**info, "replaced": sorted(owners - {info["batch_id"]})}},
            app_transactions=[Transaction(app, version)],
            max_commit_retries=0,
        )
        try:
            if table is None:
                create_table_with_add_actions(
                    root,
                    delta_schema,
                    adds,
                    mode="error",
                    partition_by=partition_by or None,
                    commit_properties=properties,
                )
                return {"version": 0, "adds": adds, "removed": []}
            _check_table(table, schema=delta_schema, partition_by=partition_by)
            recorded = table.transaction_version(app)
            if recorded is not None and version <= recorded:
                raise FencedOut(
                    f"the Delta table {root} already holds a later publish of this job "
                    f"(txn version {recorded} >= {version}): this attempt may not commit"
                )
            removed = _owned_files(table, owners)
            now = int(time.time() * 1000)
            removes = [
                RemoveAction(f["path"], True, now, f["size"], f["partition_values"])
                for f in removed
            ]
            table.create_write_transaction(
                [*removes, *adds],
                "append",
                delta_schema,
                partition_by=partition_by or None,
                commit_properties=properties,
            )
            return {"version": table.version() + 1, "adds": adds, "removed": removed}
        except (CommitFailedError, FileExistsError):
            continue  # another writer committed first: check again on top of its version
        except Exception as exc:
            if "already exists" in str(exc).lower():
                continue  # the table was created meanwhile
            if isinstance(exc, SinkError):
                raise
            raise SinkError(f"committing to the Delta table {root} failed: {exc}") from exc
    raise SinkError(f"committing to the Delta table {root} kept losing to concurrent writers")


def _next_version(table, app: str) -> int:
    """Without a control plane (a batch run by hand): one above what the table recorded."""
    recorded = table.transaction_version(app) if table is not None else None
    return 0 if recorded is None else recorded + 1


def _check_table(table, *, schema, partition_by) -> None:
    """The output must match the table: same partition columns, same columns and types."""
    metadata = table.metadata()
    if list(metadata.partition_columns) != list(partition_by):
        raise SinkError(
            f"sink 'partition_by' {partition_by} differs from the Delta table's partition "
            f"columns {list(metadata.partition_columns)}"
        )
    have = {f.name: f.type for f in table.schema().fields}
    want = {f.name: f.type for f in schema.fields}
    if have != want:
        differing = sorted(
            name for name in set(have) | set(want) if str(have.get(name)) != str(want.get(name))
        )
        raise SinkError(
            "the output's columns differ from the Delta table's schema in "
            f"{', '.join(differing)}: Tidemark does not change a Delta table's schema"
        )


def _owned_files(table, owners: set[int]) -> list[dict]:
    """The table's live files written by any attempt of the batches in `owners`."""
    actions = table.get_add_actions(flatten=True)
    columns = {name: actions.column(name).to_pylist() for name in actions.column_names}
    partitions = {n: v for n, v in columns.items() if n.startswith("partition.")}
    files = []
    for i, path in enumerate(columns["path"]):
        match = _OWNED.match(path)
        if match is None or int(match["batch"]) not in owners:
            continue
        values = {
            n[len("partition.") :]: (None if v[i] is None else _partition_text(v[i]))
            for n, v in partitions.items()
        }
        files.append(
            {
                "path": path,
                "size": columns["size_bytes"][i],
                "partition_values": values,
                "modification_time": columns["modification_time"][i],
                "rows": columns["num_records"][i],
            }
        )
    return files


def _partition_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _revert(root, committed: dict, *, schema, partition_by) -> None:
    """The fence did not record the publish: undo its Delta commit, if it is still the latest."""
    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    try:
        table = DeltaTable(root)
        if table.version() != committed["version"]:
            return  # someone committed since: the batch's next attempt replaces the output
        now = int(time.time() * 1000)
        actions = [
            RemoveAction(a.path, True, now, a.size, dict(a.partition_values))
            for a in committed["adds"]
        ]
        actions += [
            AddAction(
                f["path"],
                f["size"],
                f["partition_values"],
                _millis(f["modification_time"]),
                True,
                json.dumps({"numRecords": f["rows"]}),
            )
            for f in committed["removed"]
        ]
        if not actions:
            return
        table.create_write_transaction(
            actions,
            "append",
            DeltaSchema.from_arrow(schema),
            partition_by=partition_by or None,
            commit_properties=CommitProperties(
                custom_metadata={"tidemark": {"reverted_version": committed["version"]}},
                max_commit_retries=0,
            ),
        )
    except Exception:  # noqa: BLE001 - best effort: the next attempt replaces the output anyway
        pass


def _millis(value) -> int:
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return int(value)
