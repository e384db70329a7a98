"""The parallel COPY of every Spark partition into the attempt's unlogged staging table.

The copy is an RDD action (`foreachPartition`), which never reports the input's observation to
its `Observation` (only DataFrame actions do): so `copy_to_stage` reads the observed metrics off
the plan it executed (`input_profile.observed_metrics`) and the sink hands them to the batch.
Without them the batch would count its input in a second Spark job that reads the source again.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from workers.spark.input_profile import observed_metrics
from workers.spark.pgsink.config import quote_ident

COPY_CHUNK_CHARS = 4 * 1024 * 1024


def as_text(df: DataFrame) -> DataFrame:
    """Every column as the text PostgreSQL parses back to the same value (nulls stay null)."""
    converted = []
    for f in df.schema.fields:
        col = df[f.name]
        t = f.dataType
        if isinstance(t, T.TimestampNTZType):
            col = F.date_format(col, "yyyy-MM-dd HH:mm:ss.SSSSSS")
        elif isinstance(t, T.TimestampType):
            col = F.date_format(col, "yyyy-MM-dd HH:mm:ss.SSSSSSxxx")
        elif isinstance(t, T.BinaryType):
            col = F.concat(F.lit("\\x"), F.hex(col))
        elif isinstance(t, T.ArrayType | T.MapType | T.StructType):
            col = F.to_json(col)
        else:
            col = col.cast("string")
        converted.append(col.alias(f.name))
    return df.select(*converted)


def copy_to_stage(df: DataFrame, dsn: str, stage: str, columns: list[str]) -> dict:
    """COPY every partition of `df` into `stage`, on the executors; the metrics of the
    observations in `df`'s plan, as the copy saw them."""
    text = as_text(df)
    text.foreachPartition(partition_copier(dsn, stage, columns))
    return observed_metrics(text)


def partition_copier(dsn: str, stage: str, columns: list[str]):
    """The function each executor runs on its partition.

    Built as a closure so Spark ships it by value: executors need psycopg2, not this project.
    """
    column_list = ", ".join(quote_ident(c) for c in columns + ["_tm_part"])
    copy_sql = f"COPY {stage} ({column_list}) FROM STDIN WITH (FORMAT csv)"
    delete_sql = f"DELETE FROM {stage} WHERE _tm_part = %s"

    def copy_partition(rows) -> None:
        import io

        import psycopg2
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        conn = None
        buffer = io.StringIO()

        def flush():
            nonlocal conn, buffer
            if conn is None:
                conn = psycopg2.connect(dsn)
                conn.cursor().execute(delete_sql, [part])
            buffer.seek(0)
            conn.cursor().copy_expert(copy_sql, buffer)
            buffer = io.StringIO()

        try:
            for row in rows:
                # CSV: an unquoted empty field is NULL, a quoted one the empty string
                fields = ["" if v is None else '"' + v.replace('"', '""') + '"' for v in row]
                fields.append(str(part))
                buffer.write(",".join(fields))
                buffer.write("\n")
                if buffer.tell() >= COPY_CHUNK_CHARS:
                    flush()
            if buffer.tell():
                flush()
            if conn is not None:
                conn.commit()
        finally:
            if conn is not None:
                conn.close()

    return copy_partition
