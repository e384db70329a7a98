"""Sinks: write a batch's output so that a retry, replay or backfill replaces it, never duplicates it.

`write_sink(df, sink, batch_id=..., attempt=..., publish=...)` dispatches on sink["kind"]. Every
kind stages first and publishes inside the fence (`publish`, workers/spark/fence.py), which tells it
which earlier batches' outputs the new one replaces; those leave in the same step.

- "files": the batch's output is the directory `<path>/batch_id=<id>/` (partition columns below
  it). It is written to `<path>/_staging/batch_id=<id>-a<attempt>-<token>/`, then, inside the
  fence: the batch's previous output and every replaced batch's directory are renamed aside, the
  staged one renamed into place, the old ones deleted. Spark skips paths starting with `_`, so
  `spark.read.parquet(<path>)` sees each row once (with a `batch_id` partition column) and never a
  half-written batch. Before it writes, an attempt cleans up only the staging of earlier
  attempts of its batch, never a later one's. The renames are not one atomic step: a reader
  listing the directory in the milliseconds between them may miss the replaced rows, never see
  them twice. A worker killed during a swap leaves outputs moved aside
  (`_staging/replaced-batch_id=<id>-by-<batch>-a<attempt>-<token>`) and perhaps its own output
  in place, with its fence rolled back; the next publish of the job undoes that swap inside its
  fence, before its own, and drops the staging of any of the job's attempts that can no longer
  publish (`_tidy_staging`; not on object stores, whose renames copy file by file).
- "postgres": see workers/spark/pgsink.py.
- "delta": a Delta Lake table, one Delta commit per batch; see workers/spark/delta_sink.py.
- "iceberg": an Iceberg table, one catalog commit per batch; see workers/spark/iceberg_sink.py.
"""

import os
import re
import uuid

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from workers.spark.delta_sink import check_delta, write_delta
from workers.spark.errors import SinkError, spark_error_summary
from workers.spark.fence import Publish, static_publish
from workers.spark.iceberg_sink import KEYS as ICEBERG_KEYS
from workers.spark.iceberg_sink import check_iceberg, write_iceberg
from workers.spark.options import OptionError, normalized_writer_options
from workers.spark.pgsink import check_postgres, write_postgres
from workers.spark.sink_files import local_path, sink_files
from workers.spark.sink_schema import check_types_kept

FILE_FORMATS = ("parquet", "json", "csv", "orc")
# the files sink's directory per batch, `<path>/batch_id=<id>`: a partition column to its readers
BATCH_COLUMN = "batch_id"
SINK_KINDS = "files, postgres, delta, iceberg"
# what each kind of sink reads: a job is saved with no other key (job_config, check_known_keys); a job
# saved before that rule still runs (the delta sink refused unknown keys from the start)
SINK_KEYS = {
    "files": ("kind", "path", "format", "partition_by", "options"),
    "postgres": ("kind", "table", "mode", "key", "order_by", "version_column", "dsn_env", "dsn"),
    "delta": ("kind", "path", "mode", "partition_by"),
    "iceberg": ICEBERG_KEYS,
}


def write_sink(
    df: DataFrame,
    sink: dict,
    *,
    batch_id: int,
    attempt: int = 0,
    publish: Publish | None = None,
    version: int | None = None,
    job: str | None = None,
    own_database: list[str] | None = None,
) -> dict:
    """Write `df` as batch `batch_id`'s output; returns {"rows_out", "bytes", "location", ...}.

    `publish` is the fence (default: replace nothing, no control plane); `version` is the batch's
    source order, what a table sink compares when no version column is declared; `job` names
    the Delta sink's application transaction; `own_database` is the control plane's [system
    identifier, database]: a table sink never writes there.
    """
    if not isinstance(sink, dict):
        raise SinkError("sink must be an object with a 'kind'")
    publish = publish or static_publish()
    kind = sink.get("kind")
    if kind == "files":
        return write_files(df, sink, batch_id=batch_id, attempt=attempt, publish=publish)
    if kind == "postgres":
        return write_postgres(
            df,
            sink,
            batch_id=batch_id,
            attempt=attempt,
            publish=publish,
            version=version,
            own_database=own_database,
        )
    if kind == "delta":
        return write_delta(
            df,
            sink,
            table_path=sink_path,
            batch_id=batch_id,
            job=job or "default",
            attempt=attempt,
            publish=publish,
        )
    if kind == "iceberg":
        return write_iceberg(
            df,
            sink,
            batch_id=batch_id,
            job=job or "default",
            attempt=attempt,
            publish=publish,
            version=version,
            own_database=own_database,
        )
    raise SinkError(f"unknown sink kind {kind!r}; supported kinds: {SINK_KINDS}")


def check_sink(sink: dict) -> None:
    """Validate a sink config without Spark or a database (e.g. when a job is saved)."""
    if not isinstance(sink, dict):
        raise SinkError("sink must be an object with a 'kind'")
    kind = sink.get("kind")
    if kind == "files":
        _file_settings(sink)
    elif kind == "postgres":
        check_postgres(sink)
    elif kind == "delta":
        check_delta(sink, sink_path)
    elif kind == "iceberg":
        check_iceberg(sink)
    else:
        raise SinkError(f"unknown sink kind {kind!r}; supported kinds: {SINK_KINDS}")


def sink_path(sink: dict) -> str:
    """The directory a files or Delta sink writes to: the one check of a sink's path."""
    path = sink.get("path")
    if not isinstance(path, str) or not path.strip():
        raise SinkError("sink 'path' must be a directory path or URI")
    return path


def _file_settings(sink: dict) -> tuple[str, str, list[str], dict]:
    path = sink_path(sink)
    fmt = sink.get("format", "parquet")
    if fmt not in FILE_FORMATS:
        raise SinkError(f"sink 'format' must be one of {', '.join(FILE_FORMATS)}, got {fmt!r}")
    partition_by = sink.get("partition_by") or []
    if not isinstance(partition_by, list) or not all(isinstance(c, str) for c in partition_by):
        raise SinkError("sink 'partition_by' must be a list of column names")
    if any(c.lower() == BATCH_COLUMN for c in partition_by):
        raise SinkError(
            f"sink 'partition_by' may not name {BATCH_COLUMN!r}: the sink's own "
            f"'{BATCH_COLUMN}=<id>' directories hold each batch"
        )
    try:
        options = normalized_writer_options(fmt, sink.get("options"))
    except OptionError as exc:
        error = SinkError(f"sink 'options': {exc}")
        error.field = f"options.{exc.key}" if exc.key else "options"
        raise error from None
    return path.rstrip("/"), fmt, partition_by, options


def write_files(
    df: DataFrame, sink: dict, *, batch_id: int, attempt: int = 0, publish: Publish | None = None
) -> dict:
    path, fmt, partition_by, options = _file_settings(sink)
    unknown = [c for c in partition_by if c not in df.columns]
    if unknown:
        raise SinkError(f"sink 'partition_by' names columns {unknown} that the output lacks")
    clash = [c for c in df.columns if c.lower() == BATCH_COLUMN]
    if clash:
        raise SinkError(
            f"the output has a column {clash[0]!r}: a files sink keeps each batch in a "
            f"'{BATCH_COLUMN}=<id>' directory, whose value a reader of {path} would see instead; "
            "rename the column in the processor"
        )
    local_root = local_path(path)
    if fmt == "parquet" and local_root is not None and _pyarrow_parquet() is not None:
        check_types_kept(local_root, df.schema, batch_id=batch_id, path=path)
    publish = publish or static_publish()

    files = sink_files(df.sparkSession, path)
    token = uuid.uuid4().hex[:12]
    staging = f"{path}/_staging/batch_id={batch_id}-a{int(attempt)}-{token}"

    # a failed first write leaves no empty sink directory behind (a reader would see a sink)
    fresh = not files.exists(path)
    if not fresh:
        _drop_earlier_attempts(files, path, batch_id=batch_id, attempt=attempt)

    # rows and bytes come from the write itself: the footers of local Parquet files, otherwise an
    # observation counting the rows as they are written (no Spark job of its own either way)
    local_staging = local_path(staging)
    from_footers = fmt == "parquet" and local_staging is not None and _pyarrow_parquet() is not None
    observation = None
    if not from_footers:
        observation = Observation(f"tm_rows_{token}")
        df = df.observe(observation, F.count(F.lit(1)).alias("rows"))
    # the writer's own mode is "error if exists" (the staging directory is new: a clash is a bug);
    # the format's own method (`parquet`, `json`, ...) saves the `format` call, and each call here is
    # a round trip to the JVM
    writer = df.write.options(**{k: str(v) for k, v in options.items()})
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        getattr(writer, fmt)(staging)
        if from_footers:
            rows_out, written_bytes = _local_totals(local_staging, footers=True)
        else:
            rows_out, written_bytes = int(observation.get["rows"]), None
    except Exception as exc:
        files.delete(staging)
        if fresh:
            for created in (f"{path}/_staging", path):
                files.delete_if_empty(created)
        raise SinkError(
            f"writing {fmt} files to {path} failed: {spark_error_summary(exc)}"
        ) from exc

    final = f"{path}/batch_id={batch_id}"
    retired = None
    tidied = False
    try:
        with publish() as replaced:
            tidied = _tidy_staging(files, path, replaced)
            retired = _swap_in(
                files, path, staging, final, replaced, mover=f"{batch_id}-a{int(attempt)}-{token}"
            )
    except BaseException:
        if retired is not None and not tidied:
            # swapped in, but the fence did not commit, and no control plane will say so later:
            # the replaced outputs are still the committed ones, so they go back and this
            # attempt's output leaves. With one, nothing is undone here: the fence's lock is gone
            # by now and its commit may have landed all the same; the job's next publish undoes
            # or finishes this swap inside its own fence, by what the control plane recorded.
            files.delete(final)
            for old, aside in reversed(retired):
                files.rename(aside, old)
        files.delete(staging)
        raise
    # only once the fence committed: the replaced outputs are gone for good
    for _, aside in retired:
        files.delete(aside)
    return {
        "rows_out": rows_out,
        "bytes": written_bytes if written_bytes is not None else _data_bytes(files, final),
        "location": final,
    }


def _drop_earlier_attempts(files, path: str, *, batch_id: int, attempt: int) -> None:
    """Staging left by this batch's earlier attempts that died; a later attempt's is left alone."""
    for name in files.matching(f"{path}/_staging/*batch_id={batch_id}-*"):
        match = _STAGED.match(name)
        if match is None or match["batch"] != str(batch_id):
            continue
        earlier = match["attempt"] is None or int(match["attempt"]) < int(attempt)
        if earlier:
            files.delete(f"{path}/_staging/{name}")


_STAGED = re.compile(r"^(?:replaced-)?batch_id=(?P<batch>\d+)-(?:a(?P<attempt>\d+)-)?[0-9a-f]+$")


def _swap_in(files, path, staging, final, replaced, *, mover) -> list:
    """Inside the fence: move the outputs being replaced aside (the batch's own first, then the
    others; each named for the attempt moving it, `mover`), the staged one into place. Returns the
    (old, aside) pairs; the caller deletes them once the fence has committed."""
    retired = []
    try:
        for old in [final, *(f"{path}/batch_id={int(i)}" for i in replaced)]:
            if files.exists(old):
                aside = f"{path}/_staging/replaced-{old.rsplit('/', 1)[1]}-by-{mover}"
                if not files.rename(old, aside):
                    raise SinkError(f"cannot move the replaced output {old} aside")
                retired.append((old, aside))
        if not files.rename(staging, final):
            raise SinkError(f"cannot move the staged output into {final}")
    except BaseException:
        for old, aside in reversed(retired):
            files.rename(aside, old)
        raise
    return retired


_MOVED_ASIDE = re.compile(
    r"^replaced-batch_id=(?P<batch>\d+)-by-(?P<mover>\d+)-a(?P<attempt>\d+)-[0-9a-f]+$"
)
_ATTEMPT_STAGING = re.compile(r"^batch_id=(?P<batch>\d+)-a(?P<attempt>\d+)-[0-9a-f]+$")


def _tidy_staging(files, path: str, replaced) -> bool:
    """Inside the fence, before this publish's own swap, put `_staging/` in order for the job:
    undo the swaps its killed attempts left half-done (`_undo_swap`), and drop the staging of
    attempts that can no longer publish (their batch is not running on that attempt: a later
    attempt took over, or it ended, was cancelled or skipped). What this publish's own batch is
    writing is its running attempt's, so it stays. Every publish of the job runs this first under
    the job's fence, so no other swap of the job runs meanwhile. Entries of batches outside the
    job are left as they are.

    Returns whether it could: there is a control plane to ask, and the file system renames a
    directory in one step. On an object store a rename copies file by file, so a swap killed
    mid-rename leaves an output split between its place and its aside, which no name tells
    apart from a whole one: there the asides are left for an operator, as before."""
    ask = getattr(replaced, "outputs", None)  # a hand-made publish may yield a plain list
    if ask is None or not getattr(files, "atomic_renames", False):
        return False
    moved: dict[tuple[int, int], list[tuple[int, str]]] = {}
    staged: list[tuple[int, int, str]] = []
    for name in files.matching(f"{path}/_staging/*batch_id=*"):
        if match := _MOVED_ASIDE.match(name):
            key = (int(match["mover"]), int(match["attempt"]))
            moved.setdefault(key, []).append((int(match["batch"]), name))
        elif match := _ATTEMPT_STAGING.match(name):
            staged.append((int(match["batch"]), int(match["attempt"]), name))
    if not moved and not staged:
        return True
    asked = {mover for mover, _attempt in moved} | {batch for batch, _attempt, _name in staged}
    asked |= {batch for entries in moved.values() for batch, _name in entries}
    outputs = ask(sorted(asked))
    for (mover, attempt), entries in sorted(moved.items()):
        if mover in outputs and all(batch in outputs for batch, _ in entries):
            _undo_swap(files, path, outputs, mover, attempt, entries)
    for batch, attempt, name in staged:
        known = outputs.get(batch)
        if known is not None and not (known.running and known.attempt == attempt):
            files.delete(f"{path}/_staging/{name}")
    return True


def _undo_swap(files, path: str, outputs: dict, mover: int, attempt: int, entries: list) -> None:
    """The outputs attempt `attempt` of batch `mover` moved aside (`entries`: (batch, name)).

    When the control plane recorded a publish of that attempt or a later one of its batch, the
    swap took effect and the asides are what its worker had not yet deleted: they go. Otherwise
    the fence rolled back, and the sink goes back to what the control plane records: the moving
    attempt's output, if it reached its place, leaves first; then each aside whose batch's output
    is still recorded as shown goes back to its place, and the others go.

    The moving batch's place is emptied only while it cannot hold a recorded output: its own
    earlier output is still aside (the swap moves that one first, and it goes back last), or it
    has none. An aside whose batch is shown while something is already in its place is left as
    it is: which of the two is whole, no name says. A call stopped half-way is finished by the
    next one."""
    published = outputs[mover].published_attempt
    if published is not None and published >= attempt:
        for _, name in entries:
            files.delete(f"{path}/_staging/{name}")
        return
    own_aside = any(batch == mover for batch, _ in entries)
    if own_aside or not outputs[mover].shown:
        # what the killed attempt put in its batch's place, if it got that far, was never recorded
        files.delete(f"{path}/batch_id={mover}")
    for batch, name in sorted(entries, key=lambda entry: entry[0] == mover):
        aside = f"{path}/_staging/{name}"
        place = f"{path}/batch_id={batch}"
        if not outputs[batch].shown:
            files.delete(aside)  # replaced since, or never recorded
        elif not files.exists(place):
            if not files.rename(aside, place):
                raise SinkError(f"cannot put the output of batch {batch} back in {place}")


def _data_bytes(files, root: str) -> int:
    """Size of the data files under `root`, without checksums and markers."""
    local = local_path(root)
    if local is not None:
        # a local sink: listed without a round trip to the JVM per file
        return _local_totals(local, footers=False)[1]
    return files.data_bytes(root)


def _pyarrow_parquet():
    try:
        import pyarrow.parquet
    except ImportError:  # a cluster without pyarrow counts with an observation instead
        return None
    return pyarrow.parquet


def _local_totals(directory: str, *, footers: bool) -> tuple[int | None, int]:
    """(rows from the Parquet footers if `footers`, bytes) of the data files under `directory`."""
    parquet = _pyarrow_parquet() if footers else None
    rows, total = 0, 0
    pending = [directory]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.name.startswith((".", "_")):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                    continue
                total += entry.stat(follow_symlinks=False).st_size
                if parquet is not None:
                    rows += parquet.read_metadata(entry.path).num_rows
    return (rows if parquet is not None else None), total
