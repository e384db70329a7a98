"""The executor side of an object-store batch: one Spark partition per group of objects, each
object read with pyarrow (`S3FileSystem` for `s3://`, any fsspec filesystem otherwise) and
conformed to the schema the driver planned.

The plan (built by `read_object_store.read` on the driver) is {"source": endpoint, region and
credential variable names, "format", "options": reader options, "lineage": bool, "schema": the
Spark schema as JSON, "groups": [[location, ...], ...]}. Credentials arrive as the data source
class's `secrets` ({variable: value}), read on the driver.

pyarrow is imported where an object is read, not here: the driver's planner processes
(`create_data_source`, `plan_data_source_read`) import this module to unpickle the data source and
call only `schema()`, `reader()` and `partitions()` (tests/spark/test_python_sources_imports.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from workers.spark.errors import ReadError
from workers.spark.python_sources import note_read, plan_of

if TYPE_CHECKING:
    import pyarrow as pa

S3_SCHEMES = ("s3", "s3a")
SOURCE_FILE = "_tm_source_file"
CREDENTIAL_OPTIONS = (
    ("key_env", "access_key"),
    ("secret_env", "secret_key"),
    ("session_token_env", "session_token"),
)


class ObjectGroup(InputPartition):
    def __init__(self, locations: list[str]):
        super().__init__(None)
        self.locations = locations


class ObjectStoreSource(DataSource):
    """Registered per credential set by `python_sources.load`; `secrets` = {variable: value}."""

    secrets: dict = {}

    @classmethod
    def name(cls) -> str:
        return "objects"

    def schema(self):
        return T.StructType.fromJson(plan_of(self.options)["schema"])

    def reader(self, schema):
        return ObjectGroupReader(plan_of(self.options), self.secrets, schema)


class ObjectGroupReader(DataSourceReader):
    def __init__(self, plan: dict, secrets: dict, schema: T.StructType):
        self.plan = plan
        self.secrets = secrets
        self.schema = schema

    def partitions(self):
        return [ObjectGroup(locations) for locations in self.plan["groups"]]

    def read(self, partition: ObjectGroup):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        plan = self.plan
        target = to_arrow_schema(self.schema)
        fmt = plan["format"]
        for location in partition.locations:
            fs, path = filesystem(plan["source"], location, self.secrets)
            try:
                table = read_object(fs, path, fmt, plan["options"])
            except ReadError:
                raise
            except Exception as exc:  # ArrowInvalid, a truncated file, an S3 error mid-read
                raise ReadError(f"cannot read {fmt} object {location}: {exc}") from exc
            if plan["lineage"]:
                table = table.append_column(SOURCE_FILE, pa.array([location] * table.num_rows))
            table = conform(table, target, location)
            yield from table.to_batches(max_chunksize=10_000)
            note_read(f"object {location}", table.num_rows)


def read_object(fs, path: str, fmt: str, options: dict, *, first_block: bool = False):
    """The object as an Arrow table; with `first_block`, only its schema, from the footer or the
    first block (what the driver reads to plan)."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    if fmt == "parquet":
        if first_block:
            import pyarrow.dataset as ds

            # the footer's columns and, as read_table adds them, those of key=value path parts
            return ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive").schema
        return pq.read_table(path, filesystem=fs)
    with fs.open_input_stream(path) as stream:
        if fmt == "json":
            if first_block:
                return pjson.open_json(stream).read_next_batch().schema
            return pjson.read_json(stream)
        header = str(options.get("header", "true")).lower() == "true"
        delimiter = str(options.get("sep", options.get("delimiter", ",")))
        parse = pcsv.ParseOptions(delimiter=delimiter, quote_char=str(options.get("quote", '"')))
        read = pcsv.ReadOptions(autogenerate_column_names=not header)
        if first_block:
            return pcsv.open_csv(stream, read_options=read, parse_options=parse).schema
        return pcsv.read_csv(stream, read_options=read, parse_options=parse)


def conform(table: pa.Table, target: pa.Schema, location: str) -> pa.Table:
    """`table` with exactly the columns of `target`, in its order and types; a column the object
    lacks is null, one the plan did not see is an error (the batch would lose it silently)."""
    import pyarrow as pa

    unknown = [name for name in table.column_names if target.get_field_index(name) < 0]
    if unknown:
        raise ReadError(
            f"object {location} has column(s) {unknown} that the batch's schema (inferred from "
            "the start of each object) does not have; give the connector a schema"
        )
    columns = []
    for field in target:
        if field.name in table.column_names:
            column = table.column(field.name)
            try:
                columns.append(column.cast(field.type) if column.type != field.type else column)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ReadError(
                    f"object {location}: column {field.name!r} ({column.type}) does not fit the "
                    f"batch's type {field.type}: {exc}"
                ) from exc
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def filesystem(source: dict, location: str, secrets: dict):
    """(pyarrow filesystem, path in it) for one object."""
    parsed = urlparse(location)
    if parsed.scheme in S3_SCHEMES:
        return _s3(source, secrets), f"{parsed.netloc}{parsed.path}"
    import fsspec
    import pyarrow.fs as pafs

    try:
        fs, path = fsspec.core.url_to_fs(location)
    except Exception as exc:
        raise ReadError(f"no filesystem for {location}: {exc}") from exc
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def credentials(source: dict, *, environ=None) -> dict:
    """{variable: value} of the credential variables the source names, read in this process."""
    environ = os.environ if environ is None else environ
    found = {}
    for key, _option in CREDENTIAL_OPTIONS:
        name = source.get(key)
        if name:
            value = environ.get(name)
            if not value:
                raise ReadError(
                    f"environment variable {name} (the source's {key}) is not set on this worker"
                )
            found[name] = value
    return found


_S3_CACHE: dict[tuple, object] = {}


def _s3(source: dict, secrets: dict):
    import pyarrow.fs as pafs

    given = {option: secrets[source[key]] for key, option in CREDENTIAL_OPTIONS if source.get(key)}
    options = {"connect_timeout": 10, "request_timeout": 60}
    if source.get("endpoint_url"):
        options["endpoint_override"] = source["endpoint_url"]
    if source.get("region"):
        options["region"] = source["region"]
    key = tuple(sorted({**options, **given}.items()))
    if key not in _S3_CACHE:
        _S3_CACHE[key] = pafs.S3FileSystem(**options, **given)
    return _S3_CACHE[key]
