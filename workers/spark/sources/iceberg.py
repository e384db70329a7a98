"""Reading an `iceberg` source's batch on Spark's executors: the rows its snapshots added. No
Django here.

spec["source"] = {
    "kind": "iceberg", "table": "namespace.name", "location": the table's location,
    "snapshots": [snapshot id, ...] (the batch's items, in commit order),
    "as_of": the current snapshot when the batch was planned,
    "files": [{"path": data file, "snapshot": the snapshot that added it, "format": "parquet",
               "deletes": [position delete file, ...]}, ...],
    "schema": the table's schema as Spark's JSON,
    "columns": [{"name", "id", "names": the name mapping's names for the id}, ...],
}

The control plane chose the data files from the table's manifests (inventory/sources/iceberg/),
each confined to the table's location (workers/spark/iceberg_files.py), and each is checked
again here. The driver reads nothing but the plan: each data file is one partition of a Python
data source, read on an executor with pyarrow, its rows at the positions the delete files name
for it dropped, columns taken by field id as Iceberg does (`file_columns`; one the file lacks is
null). A file
that is gone was deleted with an expired snapshot: the batch fails naming its snapshot.
"""

from __future__ import annotations

import json
import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from workers.spark.errors import ReadError
from workers.spark.iceberg_files import confined
from workers.spark.python_sources import load, note_read, plan_of


def read(spark: SparkSession, spec: dict) -> DataFrame:
    source = spec["source"]
    table, location = source["table"], source["location"]
    files = []
    for file in source.get("files") or []:
        # confined first: whether a file outside the table exists is never told
        path = confined(
            location, file["path"], table=table, snapshot=file["snapshot"], what="data file"
        )
        deletes = [
            confined(location, d, table=table, snapshot=source.get("as_of"), what="delete file")
            for d in file.get("deletes") or []
        ]
        if file.get("format", "parquet") != "parquet":
            raise ReadError(
                f"snapshot {file['snapshot']} of the Iceberg table {table} added a "
                f"{file['format']} data file, which Tidemark cannot read (only Parquet)"
            )
        files.append(
            {"path": path, "named": file["path"], "snapshot": file["snapshot"], "deletes": deletes}
        )
    for file in files:
        for path in (file["path"], *file["deletes"]):
            if not os.path.exists(path):
                raise ReadError(_gone(table, file["snapshot"], path))
    plan = {
        "table": table,
        "files": files,
        "schema": source["schema"],
        "columns": source.get("columns") or [],
    }
    return load(spark, IcebergSource, {}, plan)


def _gone(table: str, snapshot, path: str) -> str:
    return (
        f"snapshot {snapshot} of the Iceberg table {table} cannot be read: its file "
        f"{os.path.basename(path)} is gone (deleted with an expired snapshot). The way out is a "
        'snapshot backfill: set the connector\'s config.expired to "snapshot" and retry'
    )


class DataFilePartition(InputPartition):
    def __init__(self, file: dict):
        super().__init__(None)
        self.file = file


class IcebergSource(DataSource):
    """Registered by `python_sources.load`; a local Iceberg table's files carry no secrets."""

    secrets: dict = {}

    @classmethod
    def name(cls) -> str:
        return "iceberg"

    def schema(self):
        return T.StructType.fromJson(json.loads(plan_of(self.options)["schema"]))

    def reader(self, schema):
        return IcebergFileReader(plan_of(self.options), schema)


def positions_deleted(delete_files: list[str], data_file: str, named: str):
    """The row positions of `data_file` (named `named` in the metadata) that the position delete
    files delete."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    positions = []
    for path in delete_files:
        deletes = pq.read_table(path, columns=["file_path", "pos"], partitioning=None)
        mask = pc.is_in(deletes.column("file_path"), value_set=_names(named, data_file))
        positions.append(deletes.filter(mask).column("pos"))
    return positions


def _names(named: str, path: str):
    import pyarrow as pa

    # a delete file names its data file as the metadata does (a path or a file:// URI)
    return pa.array(sorted({named, path, f"file://{path}"}), pa.string())


class IcebergFileReader(DataSourceReader):
    def __init__(self, plan: dict, schema: T.StructType):
        self.plan = plan
        self.schema = schema

    def partitions(self):
        return [DataFilePartition(file) for file in self.plan["files"]] or [DataFilePartition({})]

    def read(self, partition: DataFilePartition):
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import to_arrow_schema

        file = partition.file
        if not file:
            return
        table_name = self.plan["table"]
        try:
            # partitioning=None: a folder such as `day=2026-01-01/` is not a column (Iceberg keeps
            # every column in its data files)
            data = pq.read_table(file["path"], partitioning=None)
            deleted = positions_deleted(file["deletes"], file["path"], file["named"])
        except FileNotFoundError:
            raise ReadError(_gone(table_name, file["snapshot"], file["path"])) from None
        except (OSError, pa.ArrowException) as exc:
            raise ReadError(
                f"snapshot {file['snapshot']} of the Iceberg table {table_name} cannot be read: "
                f"{os.path.basename(file['path'])}: {exc}"
            ) from exc
        if any(len(positions) for positions in deleted):
            # rare (merge-on-read deletes): a row index is built only for a file that has some
            index = pa.array(range(data.num_rows), pa.int64())
            gone = pa.chunked_array([c for p in deleted for c in p.chunks], pa.int64())
            data = data.filter(pc.invert(pc.is_in(index, value_set=gone.combine_chunks())))
        target = to_arrow_schema(self.schema)
        found = file_columns(data.schema, self.plan.get("columns") or [])
        columns = [
            data.column(found[f.name]).cast(f.type)
            if found.get(f.name) is not None
            else pa.nulls(data.num_rows, f.type)
            for f in target
        ]
        data = pa.Table.from_arrays(columns, schema=target)
        note_read(f"iceberg file {os.path.basename(file['path'])}", data.num_rows)
        yield from data.to_batches(max_chunksize=10_000)


def file_columns(schema, columns: list[dict]) -> dict[str, str | None]:
    """{the table's column name: the data file's column holding it, or None}. Iceberg matches
    columns by field id, so a renamed column is found under its old name in older files and a
    column dropped and added again under the same name is not the old one: a file written with
    field ids (pyiceberg's, Spark's with Iceberg) is matched by id; one written without (files
    added by path, the Tidemark sink's) by the names the table's name mapping gives the id;
    without either, by name."""
    if not columns:  # a plan made before columns were planned by id: by name
        return {name: name for name in schema.names}
    present = set(schema.names)
    ids = {}
    for field in schema:
        value = (field.metadata or {}).get(b"PARQUET:field_id")
        if value is not None:
            ids[int(value)] = field.name
    found = {}
    for column in columns:
        if ids:
            found[column["name"]] = ids.get(column["id"])
        else:
            names = [n for n in column.get("names") or [column["name"]] if n in present]
            found[column["name"]] = names[0] if names else None
    return found


def covered_watermark(spec: dict) -> None:
    """None: the data's watermark column decides what the batch covered."""
    return None
