"""The data of bench_table_reads.py: one production-shaped table written as a Hudi copy-on-write
table and as an Iceberg table (the same rows, commit by commit).

The shape: card transactions, one commit a day, each day a partition (`event_date`) of
FILES_PER_COMMIT files. Columns: txn_id (int64, the record key), account_id (int64), event_ts
(timestamp, microseconds, UTC), merchant (one of 5,000 names), category (one of 12), description
(30-60 characters, mostly unique), amount (decimal(12,2)), fx_rate (double), event_date (string,
the partition).

Hudi: hudi-rs 0.5.0 reads tables but has no writer in its Python package, so the table is built
the way Spark's Hudi writer leaves a table version 6 copy-on-write table (the layout of the
Spark-written tables in apache/hudi-rs's test data): `.hoodie/hoodie.properties`, per instant a
`<ts>.commit.requested`, `<ts>.inflight` and, once complete, `<ts>.commit` holding the commit
metadata as JSON (write statistics per partition, the Avro schema in extraMetadata), a
`.hoodie_partition_metadata` in each partition folder, and base files
`<file id>_<write token>_<ts>.parquet` with the five `_hoodie_*` meta columns first. The caller
checks that hudi-rs reads the same number of rows back.

Iceberg: pyiceberg's SQL catalog on a SQLite file, one append a day (one snapshot), data files
capped at the same size as the Hudi files. Not partitioned: the worker's Iceberg reader (branch
icesrc, d07d987) opens a data file with `pq.read_table(path)`, which takes a `data/event_date=.../`
folder for a Hive partition and fails merging that inferred column with the file's own.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROWS_PER_MB = 14_700  # about 1 MB of snappy Parquet per 14,700 rows of this shape (measured)
ICEBERG_ROWS_PER_MB = 23_500  # the same without Hudi's meta columns
FILES_PER_COMMIT = 4
CATEGORIES = [
    "grocery",
    "fuel",
    "travel",
    "dining",
    "utilities",
    "entertainment",
    "health",
    "retail",
    "online",
    "transport",
    "education",
    "other",
]
WORDS = (
    "card payment online store refund fee monthly transfer airline hotel market fresh "
    "coffee station ticket pharmacy subscription order invoice cash service "
    "express city north south east west central plaza"
).split()
DAY_ZERO = 20_393  # 2025-11-01 as days since 1970-01-01
META = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]
DATA_SCHEMA = pa.schema(
    [
        ("txn_id", pa.int64()),
        ("account_id", pa.int64()),
        ("event_ts", pa.timestamp("us", tz="UTC")),
        ("merchant", pa.string()),
        ("category", pa.string()),
        ("description", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("fx_rate", pa.float64()),
        ("event_date", pa.string()),
    ]
)


def _uniform(rows: int, seed: int) -> pa.Array:
    return pc.random(rows, initializer=seed)


def _below(rows: int, limit: int, seed: int, power: float = 1.0) -> pa.Array:
    """Integers in [0, limit), uniform (power 1) or skewed towards 0 (power > 1)."""
    u = _uniform(rows, seed)
    if power != 1.0:
        u = pc.power(u, power)
    return pc.cast(pc.floor(pc.multiply(u, float(limit))), pa.int64())


def day_rows(day: int, first_id: int, rows: int) -> pa.Table:
    """One day's transactions (ids first_id .. first_id + rows - 1), the same for the same day."""
    seed = 46_000 + day * 16
    ids = pa.array(range(first_id, first_id + rows), pa.int64())
    start = (day + DAY_ZERO) * 86_400 * 1_000_000
    micros = pc.add(pc.multiply(pa.array(range(rows), pa.int64()), 86_400_000_000 // rows), start)
    words = pa.array(WORDS)
    serial = pc.cast(pc.add(_below(rows, 9 * 10**9, seed + 1), 10**9), pa.string())
    description = pc.binary_join_element_wise(
        pc.take(words, _below(rows, len(WORDS), seed + 2)),
        pc.take(words, _below(rows, len(WORDS), seed + 3)),
        pc.take(words, _below(rows, len(WORDS), seed + 4)),
        "ref",
        serial,
        " ",
    )
    merchant = pc.binary_join_element_wise(
        "merchant", pc.cast(_below(rows, 5_000, seed + 5, power=3.0), pa.string()), "-"
    )
    # amounts: log-normal cents (Box-Muller), the cent count as the decimal's unscaled value
    normal = pc.multiply(
        pc.sqrt(pc.multiply(pc.ln(pc.add(_uniform(rows, seed + 6), 1e-12)), -2.0)),
        pc.cos(pc.multiply(_uniform(rows, seed + 7), 6.283185307179586)),
    )
    cents = pc.cast(pc.floor(pc.exp(pc.add(pc.multiply(normal, 1.2), 7.5))), pa.int64())
    date = (datetime.date(1970, 1, 1) + datetime.timedelta(days=day + DAY_ZERO)).isoformat()
    return pa.table(
        {
            "txn_id": ids,
            "account_id": pc.add(_below(rows, 2_000_000, seed + 8), 1),
            "event_ts": pc.cast(micros, pa.timestamp("us", tz="UTC")),
            "merchant": merchant,
            "category": pc.take(pa.array(CATEGORIES), _below(rows, len(CATEGORIES), seed + 9)),
            "description": description,
            "amount": _cents(cents),
            "fx_rate": pc.add(pc.multiply(_uniform(rows, seed + 10), 0.2), 0.9),
            "event_date": pa.array([date] * rows, pa.string()),
        },
        schema=DATA_SCHEMA,
    )


def days(megabytes: int, commits: int):
    """(day, table) for each commit; about `megabytes` MB of Parquet in all."""
    per_day = max(1, megabytes * ROWS_PER_MB // commits)
    for day in range(commits):
        yield day, day_rows(day, day * per_day, per_day)


def _cents(cents: pa.Array) -> pa.Array:
    """decimal(12,2) amounts of the cent counts: the counts as decimals of scale 0, their buffer
    read with scale 2 (the same unscaled values)."""
    whole = pc.cast(cents, pa.decimal128(19, 0))
    return pa.Array.from_buffers(pa.decimal128(12, 2), len(whole), whole.buffers())


# ---- Hudi ----------------------------------------------------------------------------------


def _avro_schema(name: str) -> dict:
    """The Avro record schema Spark's Hudi writer stores in the commit metadata."""

    def nullable(kind):
        return ["null", kind]

    fields = [{"name": meta, "type": nullable("string"), "default": None} for meta in META]
    kinds = {
        "txn_id": "long",
        "account_id": "long",
        "event_ts": {"type": "long", "logicalType": "timestamp-micros"},
        "merchant": "string",
        "category": "string",
        "description": "string",
        "amount": {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"hoodie.{name}.{name}_record.amount",
            "size": 6,
            "logicalType": "decimal",
            "precision": 12,
            "scale": 2,
        },
        "fx_rate": "double",
        "event_date": "string",
    }
    fields += [
        {"name": field, "type": nullable(kind), "default": None} for field, kind in kinds.items()
    ]
    return {
        "type": "record",
        "name": f"{name}_record",
        "namespace": f"hoodie.{name}",
        "fields": fields,
    }


def _properties(name: str) -> str:
    schema = json.dumps(_avro_schema(name), separators=(",", ":")).replace(":", "\\:")
    lines = {
        "hoodie.table.name": name,
        "hoodie.table.type": "COPY_ON_WRITE",
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.table.base.file.format": "PARQUET",
        "hoodie.table.recordkey.fields": "txn_id",
        "hoodie.table.partition.fields": "event_date",
        "hoodie.table.precombine.field": "event_ts",
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.datasource.write.partitionpath.urlencode": "false",
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.populate.meta.fields": "true",
        "hoodie.archivelog.folder": "archived",
        "hoodie.database.name": "default",
        "hoodie.table.create.schema": schema,
    }
    return "#Properties saved by bench/table_reads_data.py\n" + "".join(
        f"{key}={value}\n" for key, value in lines.items()
    )


def write_hudi(root: Path, megabytes: int, commits: int) -> dict:
    """A Hudi copy-on-write table (version 6) at `root`; its rows, files and Parquet bytes."""
    name = root.name
    hoodie = root / ".hoodie"
    hoodie.mkdir(parents=True)
    (hoodie / "hoodie.properties").write_text(_properties(name))
    schema = json.dumps(_avro_schema(name), separators=(",", ":"))
    rows = files = size = 0
    for day, table in days(megabytes, commits):
        date = table.column("event_date")[0].as_py()
        instant = (
            f"{date.replace('-', '')}233000000"  # the day's load, half an hour before midnight
        )
        partition = f"event_date={date}"
        (hoodie / f"{instant}.commit.requested").write_text("")
        (hoodie / f"{instant}.inflight").write_text("")
        folder = root / partition
        folder.mkdir()
        (folder / ".hoodie_partition_metadata").write_text(
            f"#partition metadata\ncommitTime={instant}\npartitionDepth=1\n"
        )
        stats = []
        per_file = -(-table.num_rows // FILES_PER_COMMIT)
        for task in range(FILES_PER_COMMIT):
            part = table.slice(task * per_file, per_file)
            file_id = f"{uuid.UUID(int=(day << 16) | task, version=4)}-0"
            file_name = f"{file_id}_{task}-{day + 1}-{day * 10 + task}_{instant}.parquet"
            n = part.num_rows
            keys = pa.compute.cast(part.column("txn_id"), pa.string())
            meta = [
                pa.array([instant] * n, pa.string()),
                pa.array([f"{instant}_{task}_{i}" for i in range(n)], pa.string()),
                keys,
                pa.array([partition] * n, pa.string()),
                pa.array([file_name] * n, pa.string()),
            ]
            full = pa.Table.from_arrays([*meta, *part.columns], names=[*META, *part.column_names])
            path = folder / file_name
            pq.write_table(full, path, compression="snappy")
            written = os.path.getsize(path)
            stats.append(
                {
                    "fileId": file_id,
                    "path": f"{partition}/{file_name}",
                    "prevCommit": "null",
                    "numWrites": n,
                    "numDeletes": 0,
                    "numUpdateWrites": 0,
                    "numInserts": n,
                    "totalWriteBytes": written,
                    "totalWriteErrors": 0,
                    "tempPath": None,
                    "partitionPath": partition,
                    "totalLogRecords": 0,
                    "totalLogFilesCompacted": 0,
                    "totalLogSizeCompacted": 0,
                    "totalUpdatedRecordsCompacted": 0,
                    "totalLogBlocks": 0,
                    "totalCorruptLogBlock": 0,
                    "totalRollbackBlocks": 0,
                    "fileSizeInBytes": written,
                    "minEventTime": None,
                    "maxEventTime": None,
                    "runtimeStats": None,
                }
            )
            rows += n
            files += 1
            size += written
        metadata = {
            "partitionToWriteStats": {partition: stats},
            "compacted": False,
            "extraMetadata": {"schema": schema},
            "operationType": "INSERT",
        }
        (hoodie / f"{instant}.commit").write_text(json.dumps(metadata, indent=2))
    return {"rows": rows, "files": files, "bytes": size, "commits": commits}


# ---- Iceberg -------------------------------------------------------------------------------


def write_iceberg(folder: Path, megabytes: int, commits: int) -> dict:
    """An Iceberg table `bench.transactions` in a SQL catalog on `folder/catalog.db`; its rows,
    files, Parquet bytes and the catalog's properties. Without Hudi's five meta columns a row
    takes less Parquet: more rows give the same megabytes."""
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = folder / "warehouse"
    warehouse.mkdir(parents=True)
    properties = {"uri": f"sqlite:///{folder / 'catalog.db'}", "warehouse": f"file://{warehouse}"}
    catalog = SqlCatalog("bench", **properties)
    catalog.create_namespace("bench")
    rows = 0
    table = None
    for _day, data in days(megabytes * ICEBERG_ROWS_PER_MB // ROWS_PER_MB, commits):
        if table is None:
            # pyiceberg cuts files by their size in memory: FILES_PER_COMMIT files a day
            target = data.nbytes // FILES_PER_COMMIT + 1
            table = catalog.create_table(
                "bench.transactions",
                schema=DATA_SCHEMA,
                properties={"write.target-file-size-bytes": str(target)},
            )
        table.append(data)
        rows += data.num_rows
    table = catalog.load_table("bench.transactions")
    files = [task.file for task in table.scan().plan_files()]
    return {
        "rows": rows,
        "files": len(files),
        "bytes": sum(f.file_size_in_bytes for f in files),
        "commits": commits,
        "catalog": properties,
    }
