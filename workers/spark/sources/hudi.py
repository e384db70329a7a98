"""Reading a `hudi` source's batch on Spark's executors: the rows its instants were the last to
write. No Django here.

spec["source"] = {
    "kind": "hudi", "path": table directory,
    "instants": [instant, ...] (the batch's items, in timeline order),
    "reads": [instant, ...] (those that changed data: not clustering or compaction),
    "slices": [{"instant": the slice's base instant, "base": relative path,
                "logs": [relative path, ...]}, ...],
    "as_of": the last completed instant when the batch was planned,
}

The control plane chose the file slices (inventory/sources/hudi.py). The driver reads only the
table's schema; each file slice is one partition of a Python data source, read on an executor by
hudi-rs's file group reader as of the planned instant (base file and log files merged, so a
merge-on-read slice gives each key's latest state; a log block of a later instant is not), keeping the records whose `_hoodie_commit_time` is one of `reads`. Every
file is resolved inside the table directory before it is opened; one that is gone was cleaned
since the batch was planned: the batch fails naming its instant, never skips it.
"""

from __future__ import annotations

import json
import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from workers.spark.errors import ReadError
from workers.spark.hudi_files import metadata_confined
from workers.spark.python_sources import load, note_read, plan_of

COMMIT_TIME = "_hoodie_commit_time"


def read(spark: SparkSession, spec: dict) -> DataFrame:
    from pyspark.sql.pandas.types import from_arrow_schema

    source = spec["source"]
    metadata_confined(source["path"])  # as the control plane checked it, again before opening
    try:
        from hudi import HudiTable

        arrow_schema = HudiTable(source["path"]).get_schema()
    except Exception as exc:  # HudiCoreError: the table is gone or unreadable
        raise ReadError(f"the Hudi table {source['path']} cannot be read: {exc}") from exc
    schema = from_arrow_schema(arrow_schema, prefer_timestamp_ntz=False)
    slices = source.get("slices") or []
    for file_slice in slices:
        for name in filter(None, [file_slice["base"], *file_slice["logs"]]):
            inside(source["path"], name, instant=file_slice["instant"])
    plan = {
        "path": source["path"],
        "reads": source.get("reads") or [],
        "slices": slices if source.get("reads") else [],
        "as_of": source.get("as_of"),
        "schema": schema.json(),
    }
    return load(spark, HudiSource, {}, plan)


def inside(path: str, relative: str, *, instant: str) -> str:
    """The file a slice names, resolved inside the table directory, or a ReadError naming the
    slice's instant (the same message whether an outside file exists or not)."""
    root = os.path.realpath(path)
    resolved = None
    if not os.path.isabs(relative) and ".." not in relative.replace("\\", "/").split("/"):
        resolved = os.path.realpath(os.path.join(root, relative))
    if resolved is None or not resolved.startswith(root + os.sep):
        raise ReadError(
            f"instant {instant} of the Hudi table {path} names a file outside the table "
            "directory: refused"
        )
    return resolved


class SliceGroup(InputPartition):
    def __init__(self, file_slice: dict):
        super().__init__(None)
        self.file_slice = file_slice


class HudiSource(DataSource):
    """Registered by `python_sources.load`; a Hudi table on the local filesystem has no secrets."""

    secrets: dict = {}

    @classmethod
    def name(cls) -> str:
        return "hudi"

    def schema(self):
        return T.StructType.fromJson(json.loads(plan_of(self.options)["schema"]))

    def reader(self, schema):
        return HudiSliceReader(plan_of(self.options), schema)


class HudiSliceReader(DataSourceReader):
    def __init__(self, plan: dict, schema: T.StructType):
        self.plan = plan
        self.schema = schema

    def partitions(self):
        return [SliceGroup(file_slice) for file_slice in self.plan["slices"]] or [SliceGroup({})]

    def read(self, partition: SliceGroup):
        import pyarrow as pa
        import pyarrow.compute as pc
        from hudi import HudiReadOptions, HudiTable
        from pyspark.sql.pandas.types import to_arrow_schema

        file_slice = partition.file_slice
        if not file_slice:
            return
        path = self.plan["path"]
        instant = file_slice["instant"]
        names = [name for name in [file_slice["base"], *file_slice["logs"]] if name]
        for name in names:
            if not os.path.exists(inside(path, name, instant=instant)):
                raise ReadError(
                    f"the file slice of instant {instant} of the Hudi table {path} was cleaned "
                    f"since the batch was planned ({os.path.basename(name)} is gone): retry the "
                    "batch, which reads the newer slice"
                )
        try:
            options = HudiReadOptions()
            if self.plan.get("as_of"):
                options = options.with_as_of_timestamp(self.plan["as_of"])
            reader = HudiTable(path).create_file_group_reader_with_options(options)
            batch = reader.read_file_slice_from_paths(file_slice["base"], file_slice["logs"])
        except Exception as exc:  # HudiCoreError: a corrupt or unreadable file
            raise ReadError(
                f"the file slice of instant {instant} of the Hudi table {path} cannot be read: "
                f"{exc}"
            ) from exc
        table = pa.Table.from_batches([batch])
        mask = pc.is_in(table.column(COMMIT_TIME), value_set=pa.array(self.plan["reads"]))
        table = table.filter(mask)
        target = to_arrow_schema(self.schema)
        columns = [table.column(field.name).cast(field.type) for field in target]
        table = pa.Table.from_arrays(columns, schema=target)
        note_read(f"hudi slice {os.path.basename(file_slice['base'])}", table.num_rows)
        yield from table.to_batches(max_chunksize=10_000)


def covered_watermark(spec: dict) -> None:
    """None: the data's watermark column decides what the batch covered."""
    return None
