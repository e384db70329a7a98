"""The data of bench_small_batches.py: 4-row Parquet objects in S3 and 4-row slices of a table,
the batch specs that read them, and the bare Spark read + write of the same rows."""

import io
import os
from pathlib import Path

ROWS = 4
BUCKET = "small"
KEY_ENV, SECRET_ENV = "BENCH_SMALL_S3_KEY", "BENCH_SMALL_S3_SECRET"
DSN_ENV = "BENCH_SMALL_DSN"
SCHEMA = "id bigint, name string, amount int"


class Data:
    def __init__(self, endpoint: str, dsn: str, work: Path):
        import boto3
        import psycopg2

        self.endpoint, self.dsn, self.work = endpoint, dsn, work
        self.s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=os.environ[KEY_ENV],
            aws_secret_access_key=os.environ[SECRET_ENV],
            region_name="us-east-1",
        )
        self.s3.create_bucket(Bucket=BUCKET)
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True
        with self.conn.cursor() as cur:
            cur.execute("CREATE TABLE src (id bigint PRIMARY KEY, name text, amount int)")
        self.next_id = 1
        self.batch = 0

    def rows(self) -> list[tuple]:
        first = self.next_id
        self.next_id += ROWS
        return [(i, f"name-{i}", i % 100) for i in range(first, first + ROWS)]

    def new_object(self) -> tuple[str, int]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = self.rows()
        table = pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int64()),
                "name": pa.array([r[1] for r in rows]),
                "amount": pa.array([r[2] for r in rows], pa.int32()),
            }
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        key = f"in/s-{rows[0][0]:08d}.parquet"
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=buffer.getvalue())
        return f"s3://{BUCKET}/{key}", len(buffer.getvalue())

    def new_slice(self) -> tuple[int, int]:
        rows = self.rows()
        with self.conn.cursor() as cur:
            cur.executemany("INSERT INTO src VALUES (%s, %s, %s)", rows)
        return rows[0][0], rows[-1][0] + 1

    def spec(self, source: dict, sink: dict) -> dict:
        self.batch += 1
        return {
            "job": "small",
            "batch_id": self.batch,
            "kind": "incremental",
            "lower": self.batch,
            "upper": self.batch + 1,
            "items": ["item"],
            "format": "parquet",
            "read_options": {},
            "schema": None,
            "lineage": False,
            "processor": "passthrough",
            "params": {},
            "sink": sink,
            "attempt": 1,
            "source": source,
        }

    def object_source(self) -> tuple[dict, str]:
        location, size = self.new_object()
        source = {
            "kind": "object_store",
            "objects": [{"location": location, "size": size}],
            "format": "parquet",
            "endpoint_url": self.endpoint,
            "region": "us-east-1",
            "key_env": KEY_ENV,
            "secret_env": SECRET_ENV,
        }
        return source, location

    def table_source(self) -> tuple[dict, tuple[int, int]]:
        lower, upper = self.new_slice()
        source = {
            "kind": "table",
            "dsn_env": DSN_ENV,
            "table": "src",
            "column": "id",
            "column_type": "int",
            "slices": [[lower, upper]],
            "lookback": 0,
        }
        return source, (lower, upper)


def bare_copy(dsn: str, table: str):
    """The least a Spark job writing to PostgreSQL does: one COPY per partition into the table."""

    def copy(rows):
        import psycopg2

        buffer = io.StringIO()
        for row in rows:
            buffer.write(",".join("" if v is None else str(v) for v in row) + "\n")
        if not buffer.tell():
            return
        buffer.seek(0)
        conn = psycopg2.connect(dsn)
        try:
            conn.cursor().copy_expert(f"COPY {table} FROM STDIN WITH (FORMAT csv)", buffer)
            conn.commit()
        finally:
            conn.close()

    return copy


def bare_object(spark, data: Data, location: str, write):
    import pyarrow.parquet as pq

    from workers.spark.sources.object_store_source import filesystem

    settings = {"endpoint_url": data.endpoint, "region": "us-east-1"}
    secrets = {KEY_ENV: os.environ[KEY_ENV], SECRET_ENV: os.environ[SECRET_ENV]}
    source = {**settings, "key_env": KEY_ENV, "secret_env": SECRET_ENV}
    fs, path = filesystem(source, location, secrets)
    table = pq.read_table(path, filesystem=fs)
    rows = [tuple(row.values()) for row in table.to_pylist()]
    # one partition, as the batch reads one object: a local list would get the default four
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), SCHEMA)
    write(df)


def bare_table(spark, data: Data, bounds: tuple[int, int], write):
    import psycopg2

    conn = psycopg2.connect(data.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM src WHERE id >= %s AND id < %s ORDER BY id", bounds)
            rows = cur.fetchall()
    finally:
        conn.close()
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), SCHEMA)
    write(df)
