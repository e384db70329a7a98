"""Read a batch of a `table` connector: the rows of its column slices, one Spark partition each.

spec["source"] = {"kind": "table", "dsn_env", "table", "column", "column_type",
                  "slices": [[lower, upper], ...] (half-open column ranges, JSON values),
                  "lookback": seconds (timestamp column) or values (integer column)}

The driver checks the connection and the table's columns, then each slice is read on an executor
with psycopg2 (`lower <= column < upper`, a bound-parameter query over quoted identifiers). The DSN
comes from the environment variable `dsn_env` of the worker (and of its executors): never from the
spec. With `lookback`, one more partition re-reads the window before the first slice, for rows
that committed late; the job's upsert sink removes the duplicates.
"""

import json
import os
from datetime import datetime, timedelta
from decimal import Decimal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from workers.spark.errors import ReadError, scrub_dsn

# PostgreSQL type oid -> Spark type; anything else is read as its text
_TYPES = {
    16: T.BooleanType(),
    20: T.LongType(),
    21: T.ShortType(),
    23: T.IntegerType(),
    700: T.FloatType(),
    701: T.DoubleType(),
    1700: T.DecimalType(38, 10),
    1082: T.DateType(),
    1114: T.TimestampNTZType(),
    1184: T.TimestampType(),
    17: T.BinaryType(),
}
CONNECT_TIMEOUT = 10


def _identifier(name: str) -> str:
    if not isinstance(name, str) or not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise ReadError(f"{name!r} is not a valid SQL identifier")
    return f'"{name}"'


def _relation(table: str) -> str:
    parts = table.split(".") if isinstance(table, str) else []
    if not 1 <= len(parts) <= 2:
        raise ReadError(f"table {table!r}: expected 'table' or 'schema.table'")
    return ".".join(_identifier(part) for part in parts)


def _value(raw, column_type: str):
    return raw if column_type == "int" else datetime.fromisoformat(raw)


def _dsn(dsn_env) -> str:
    dsn = os.environ.get(dsn_env) if isinstance(dsn_env, str) else None
    if not dsn:
        raise ReadError(
            f"environment variable {dsn_env} (the source's DSN) is not set on the worker"
        )
    return dsn


def _connect(dsn: str, dsn_env: str):
    import psycopg2

    try:
        conn = psycopg2.connect(
            dsn, connect_timeout=CONNECT_TIMEOUT, application_name="tidemark-worker"
        )
    except psycopg2.Error as exc:
        reason = scrub_dsn(exc, dsn).splitlines()[0]
        raise ReadError(f"cannot connect to the database in ${dsn_env}: {reason}") from None
    conn.set_session(readonly=True)
    # UTC for the session (committed, so each slice's rollback keeps it): a timestamptz comes
    # back as the instant it is, and one near the end of year 9999 stays in Python's range
    # whatever the role's TimeZone
    with conn.cursor() as cursor:
        cursor.execute("SET TimeZone = 'UTC'")
    conn.commit()
    return conn


def _ranges(source: dict) -> list[tuple]:
    column_type = source["column_type"]
    slices = source.get("slices") or []
    if not slices:
        raise ReadError("a table batch needs at least one slice")
    ranges = [(_value(lo, column_type), _value(hi, column_type)) for lo, hi in slices]
    lookback = source.get("lookback") or 0
    if lookback:
        first = ranges[0][0]
        window = lookback if column_type == "int" else timedelta(seconds=lookback)
        ranges.insert(0, (first - window, first))
    return ranges


def _schema(conn, select: str) -> tuple[T.StructType, list[int]]:
    with conn.cursor() as cursor:
        cursor.execute(f"{select} LIMIT 0", {"lower": None, "upper": None})
        description = cursor.description
    fields = [
        T.StructField(col.name, _TYPES.get(col.type_code, T.StringType())) for col in description
    ]
    return T.StructType(fields), [col.type_code for col in description]


def _convert(value, type_code: int):
    if value is None:
        return None
    if type_code in _TYPES:
        if type_code == 17:
            return bytes(value)
        if type_code == 1700 and not isinstance(value, Decimal):
            return Decimal(str(value))
        return value
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def read(spark: SparkSession, spec: dict) -> DataFrame:
    source = spec["source"]
    dsn_env = source.get("dsn_env")
    relation = _relation(source.get("table"))
    column = _identifier(source.get("column"))
    select = f"SELECT * FROM {relation} WHERE {column} >= %(lower)s AND {column} < %(upper)s"  # noqa: S608
    ranges = _ranges(source)
    # read on the driver and shipped to the executors inside the task, as the postgres sink does:
    # never in the spec, a log or an error
    dsn = _dsn(dsn_env)
    conn = _connect(dsn, dsn_env)
    try:
        schema, type_codes = _schema(conn, select)
    except Exception as exc:
        reason = scrub_dsn(exc, dsn).splitlines()[0]
        raise ReadError(f"cannot read {source.get('table')}: {reason}") from None
    finally:
        conn.close()

    table = source.get("table")

    def fetch(partition):
        conn = _connect(dsn, dsn_env)
        try:
            for lower, upper in partition:
                # a named cursor streams the slice instead of holding it all in memory
                with conn.cursor(name="tidemark_slice") as cursor:
                    cursor.itersize = 5_000
                    cursor.execute(f"{select} ORDER BY {column}", {"lower": lower, "upper": upper})
                    try:
                        for row in cursor:
                            yield tuple(
                                _convert(v, t) for v, t in zip(row, type_codes, strict=True)
                            )
                    except (ValueError, OverflowError) as exc:
                        # the driver's typecasting: a date or timestamp outside years 1-9999, an
                        # interval past Python's timedelta
                        raise ReadError(
                            f"cannot read {table} rows from {lower} to {upper}: a value Python "
                            f"cannot hold ({exc}), such as a date or timestamp outside years "
                            "1-9999 or an interval of more than 999,999,999 days"
                        ) from None
                conn.rollback()
        finally:
            conn.close()

    rdd = spark.sparkContext.parallelize(ranges, len(ranges)).mapPartitions(fetch)
    return spark.createDataFrame(rdd, schema)


def covered_watermark(spec: dict) -> None:
    """None: the data's watermark column decides what the batch covered."""
    return None
