"""A files sink's column types kept from batch to batch.

Each batch of a files sink is its own directory, so nothing stops a batch from writing a column
as a string that earlier batches wrote as an integer, and then no reader of the sink can read it
whole (`spark.read.parquet(<path>)` fails, or reads one type and mangles the other). Before a
Parquet batch is written, its output's column types are compared with those Spark recorded in the
footer of one file of the sink's latest other batch (Spark's own schema, under
`org.apache.spark.sql.parquet.row.metadata`): a column in both with another type fails the batch,
naming it. Columns added or left out are allowed (a reader merges them, `mergeSchema`).

Checked for local sinks (a `file:` path or a plain one); an object-store sink is not read back.
"""

import json
import os
import re

from pyspark.sql.types import StructType

from workers.spark.errors import SinkError

SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
_BATCH_DIR = re.compile(r"^batch_id=(\d+)$")


def check_types_kept(local_root: str, schema: StructType, *, batch_id: int, path: str) -> None:
    """SinkError naming the columns whose type differs from the latest other batch's."""
    earlier = _recorded_schema(local_root, batch_id=batch_id)
    if earlier is None:
        return
    # compared as Spark names types (nullability aside: a reader's columns are all nullable)
    had = {f.name.lower(): f.dataType.simpleString() for f in earlier.fields}
    differing = [
        f"{f.name} ({had[f.name.lower()]} before, {f.dataType.simpleString()} now)"
        for f in schema.fields
        if f.name.lower() in had and had[f.name.lower()] != f.dataType.simpleString()
    ]
    if differing:
        raise SinkError(
            f"the output's column types differ from the earlier batches in {path}: "
            f"{', '.join(differing)}; a reader of the sink could not read both. Cast them in "
            "the processor, or write the new types to a new path"
        )


def _recorded_schema(root: str, *, batch_id: int) -> StructType | None:
    """Spark's schema from one Parquet file of the highest-numbered batch other than `batch_id`."""
    try:
        with os.scandir(root) as entries:
            batches = sorted(
                (
                    (int(m.group(1)), e.path)
                    for e in entries
                    if (m := _BATCH_DIR.match(e.name)) and e.is_dir(follow_symlinks=False)
                ),
                reverse=True,
            )
    except FileNotFoundError:
        return None
    for number, directory in batches:
        if number == int(batch_id):
            continue
        data_file = _first_parquet(directory)
        if data_file is None:
            continue
        import pyarrow.parquet as pq

        metadata = pq.read_schema(data_file).metadata or {}
        recorded = metadata.get(SPARK_SCHEMA_KEY)
        return StructType.fromJson(json.loads(recorded)) if recorded else None
    return None


def _first_parquet(directory: str) -> str | None:
    """A data file under `directory` (partition folders below it walked), or None."""
    pending = [directory]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name.startswith((".", "_")):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.name.endswith(".parquet"):
                    return entry.path
    return None
