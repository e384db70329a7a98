"""Which live files of an Iceberg table can hold one of a batch's keys, from the files' own
column bounds (the manifests' lower and upper bounds), so an upsert reads only those.

A file is ruled out when, for some key column, the batch's keys all lie outside the file's
[lower, upper] range. Bounds are used only for the types whose Python values compare the same way
as Spark's and Parquet's (integers and strings: strings by code point, which is UTF-8 byte
order); for other types, and for a file with no bound for a column, the file stays in. Truncated
string bounds (Iceberg's default metrics keep 16 characters) are widened by the writer, never
narrowed, so they only keep more files in.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def key_ranges(df: DataFrame, key: list[str], schema) -> dict[int, tuple] | None:
    """{field id: (smallest, largest)} of the batch's non-null keys, per prunable key column, from
    one aggregate on the executors; None when some key column holds no value at all (no stored
    row can equal a null key, so no file is touched)."""
    from pyiceberg.types import IntegerType, LongType, StringType

    fields = {}
    for name in key:
        field = schema.find_field(name)
        if isinstance(field.field_type, IntegerType | LongType | StringType):
            fields[name] = field.field_id
    if not fields:
        return {}
    row = df.agg(
        *(F.min(name).alias(f"lo_{i}") for i, name in enumerate(fields)),
        *(F.max(name).alias(f"hi_{i}") for i, name in enumerate(fields)),
    ).collect()[0]
    ranges = {}
    for i, field_id in enumerate(fields.values()):
        low, high = row[f"lo_{i}"], row[f"hi_{i}"]
        if low is None:
            return None
        ranges[field_id] = (low, high)
    return ranges


def may_hold(data_file, ranges: dict[int, tuple], schema) -> bool:
    """False only when the file's bounds prove it holds none of the batch's keys."""
    from pyiceberg.conversions import from_bytes

    lowers = data_file.lower_bounds or {}
    uppers = data_file.upper_bounds or {}
    for field_id, (low, high) in ranges.items():
        field_type = schema.find_field(field_id).field_type
        if field_id in lowers and from_bytes(field_type, lowers[field_id]) > high:
            return False
        if field_id in uppers and from_bytes(field_type, uppers[field_id]) < low:
            return False
    return True
