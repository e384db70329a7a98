"""`job_output` connectors: a job reads another job's committed batches, in commit order.

    {"job": "<upstream job name>", "retention_commits": N}   or   {..., "retention_days": D}

The items are the upstream job's commits: its batches with a `commit_seq` (tidemark_succeed numbers
them 1, 2, ... in the order they commit, under the upstream watermark's row lock), the item id IS
the commit_seq. So the downstream job plans, backfills, reports gaps and is corrected with the same
SQL as any other source, and a downstream watermark says "every upstream commit up to here".

Visibility (invariant 5): commit n+1 is numbered only after commit n's transaction ended (the
lock is held to commit, and the number is read in a statement that starts after the lock is
granted), so a reader that sees commit n+1 sees every commit before it: planning up to
max(commit_seq) never passes a commit still in flight (tests/sources/test_job_output.py).

Retention: commits more than `retention_commits` behind the newest one, or that finished more than
`retention_days` ago, are expired. Planning over an expired commit, reading one, or correcting a
downstream watermark back to one is an explicit error naming the retention and the commit, never a
silent skip. Without a retention setting every commit stays replayable.
"""

import logging

from inventory.models import Batch, ConnectorKind, Job
from inventory.services.errors import Conflict, InvalidInput
from inventory.sources.config import check_known_keys
from inventory.sources.items import ItemSource
from inventory.sql import gateway

RETENTION_KEYS = ("retention_commits", "retention_days")
_KEYS = ("job", "lineage", *RETENTION_KEYS)
# the upstream sinks whose per-batch output a downstream worker can read
READABLE_SINKS = ("files",)

log = logging.getLogger(__name__)
# how many job_output hops a chain may have before it is taken for a cycle
MAX_CHAIN = 100


def validate(config: dict) -> dict:
    check_known_keys(config, _KEYS, kind="job_output")
    name = config.get("job")
    if not isinstance(name, str) or not name:
        raise InvalidInput("config.job", "name the upstream job whose commits this connector reads")
    upstream = Job.objects.filter(name=name).select_related("connector").first()
    if upstream is None:
        raise InvalidInput("config.job", f"there is no job named {name!r}")
    _check_readable_sink(upstream, upstream.sink)
    given = [key for key in RETENTION_KEYS if key in config]
    if len(given) > 1:
        raise InvalidInput(
            f"config.{given[1]}", "give one retention: retention_commits or retention_days"
        )
    for key in given:
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInput(f"config.{key}", f"must be a positive integer, got {value!r}")
    if "lineage" in config and not isinstance(config["lineage"], bool):
        raise InvalidInput("config.lineage", "must be true or false")
    # a chain that already loops through the upstream job (formed outside these checks)
    upstream_chain(name, field="config.job")
    return config


def _check_readable_sink(upstream: Job, sink: dict | None) -> None:
    kind = (sink or {}).get("kind")
    if kind in READABLE_SINKS:
        return
    if kind == "postgres":
        why = (
            "writes to a PostgreSQL table: an upsert sink keeps no per-batch output to read, "
            "so commits cannot be replayed one by one"
        )
    elif not kind:
        why = "has no sink in Tidemark (its batches are processed outside): no output to read"
    else:
        why = f"writes to a {kind!r} sink"
    raise InvalidInput(
        "config.job",
        f"job {upstream.name} {why}; a job_output connector reads upstream jobs with a "
        f"{' or '.join(READABLE_SINKS)} sink",
    )


def upstream_chain(name: str, *, field: str) -> list[str]:
    """The job names a job_output connector on job `name` reads through, `name` first: the
    upstream job, its own upstream, ... Raises InvalidInput(`field`) on a cycle."""
    chain = [name]
    while len(chain) <= MAX_CHAIN:
        config = (
            Job.objects.filter(name=chain[-1], connector__kind=ConnectorKind.JOB_OUTPUT)
            .values_list("connector__config", flat=True)
            .first()
        )
        if not config or not config.get("job"):
            return chain
        following = config["job"]
        if following in chain:
            loop = " -> ".join([*chain[chain.index(following) :], following])
            raise InvalidInput(field, f"jobs would read their own output in a cycle: {loop}")
        chain.append(following)
    raise InvalidInput(field, f"the chain of jobs from {name} is longer than {MAX_CHAIN}")


def check_new_job(*, name: str, connector) -> None:
    """A job created on a job_output connector may not be (an upstream of) its own upstream."""
    if connector.kind != ConnectorKind.JOB_OUTPUT:
        return
    upstream = (connector.config or {}).get("job")
    if upstream == name:
        raise InvalidInput(
            "connector", f"connector {connector.name} reads job {name}: a job cannot read itself"
        )
    chain = upstream_chain(upstream, field="connector")
    if name in chain:
        loop = " -> ".join([name, *chain[: chain.index(name) + 1]])
        raise InvalidInput("connector", f"jobs would read their own output in a cycle: {loop}")


def check_connector(*, connector, config: dict, reset: bool = False) -> None:
    """A job_output connector given a new config may not make its own jobs read themselves (none
    of them may be upstream of the job it is to read); outside a reset (connector_reset, which
    starts the jobs over) the upstream job is its source identity and stays while jobs read it:
    their watermarks count that job's commits."""
    if connector.kind != ConnectorKind.JOB_OUTPUT:
        return
    mine = set(Job.objects.filter(connector=connector).values_list("name", flat=True))
    old = (connector.config or {}).get("job")
    chain = upstream_chain(config["job"], field="config.job")
    for index, name in enumerate(chain):
        if name in mine:
            loop = " -> ".join([name, *chain[: index + 1]])
            raise InvalidInput("config.job", f"jobs would read their own output in a cycle: {loop}")
    if mine and not reset and config["job"] != old:
        raise InvalidInput(
            "config.job",
            f"job(s) {', '.join(sorted(mine)[:5])} count the commits of job {old}; re-pointing "
            "them at another job's commits needs a reset (POST connectors/{name}/reset/ with the "
            "new config and a reason: their watermarks start over)",
        )


def check_job_delete(*, job: Job) -> None:
    """A job whose commits a job_output connector reads stays: a new job of the same name would
    number its commits from 1 again under the readers' watermarks."""
    readers = list(downstream_connectors(job).order_by("name").values_list("name", flat=True)[:5])
    if readers:
        raise Conflict(
            f"job {job.name}'s commits are read by connector(s) {', '.join(readers)}; "
            "delete them or reset them to another job first"
        )


def downstream_connectors(job: Job):
    """The job_output connectors that read `job`'s commits."""
    from inventory.models import Connector

    return Connector.objects.filter(kind=ConnectorKind.JOB_OUTPUT, config__job=job.name)


def downstream_jobs(job: Job):
    return Job.objects.filter(
        connector__kind=ConnectorKind.JOB_OUTPUT, connector__config__job=job.name
    )


# ---- items ---------------------------------------------------------------------------------------


def _upstream(connector) -> Job:
    name = (connector.config or {}).get("job")
    upstream = Job.objects.filter(name=name).first()
    if upstream is None:
        raise InvalidInput(
            "config.job", f"connector {connector.name} reads job {name!r}, which does not exist"
        )
    if Job.objects.filter(connector=connector, name=name).exists():
        raise InvalidInput("config.job", f"job {name} would read its own output")
    upstream_chain(name, field="config.job")
    return upstream


def _retention(config: dict) -> tuple[str, int] | None:
    for key in RETENTION_KEYS:
        if key in config:
            return key, int(config[key])
    return None


def _expired_sql(upstream_id: int, config: dict) -> str:
    """SQL true for an upstream commit (a row of inventory_batch) outside the retention."""
    retention = _retention(config)
    if retention is None:
        return "false"
    key, amount = retention
    if key == "retention_commits":
        # an uncorrelated subquery: evaluated once per statement, over batch_commit_seq_unique
        return (
            "commit_seq <= (SELECT max(c.commit_seq) FROM inventory_batch AS c "
            f"WHERE c.job_id = {int(upstream_id)} AND c.commit_seq IS NOT NULL) - {amount}"
        )
    return f"finished_at < statement_timestamp() - make_interval(days => {amount})"


def _retention_text(config: dict) -> str:
    key, amount = _retention(config)
    return f"{key}={amount}"


def _literal(text: str) -> str:
    # job names are slugs; quotes doubled anyway, and no % (the text passes through mogrify)
    return "'" + text.replace("'", "''").replace("%", "") + "'"


def item_source(connector) -> ItemSource:
    """The upstream job's commits as items: uid = commit_seq, item = the upstream batch id.

    Weight: the bytes of the upstream batch's output (what the downstream batch reads), else the
    upstream batch's own weight; a replaced output weighs nothing (it contributes no rows).
    Planning over an expired commit raises (its `settled` calls `tidemark_refuse` with the
    message: plain SQL has no RAISE), so every planner (incremental, acquire, backfill, preview) stops with
    an error naming the retention and the commit instead of planning over it; reads that only
    list or count commits (lag, coverage, a batch's items) never evaluate it.
    """
    config = connector.config or {}
    upstream = _upstream(connector)
    # commit_seq is numbered in commit order (module docstring): every visible commit is settled
    settled = "true"
    expired = _expired_sql(upstream.pk, config)
    if expired != "false":
        prefix = _literal("commit ")
        suffix = _literal(
            f" of job {upstream.name} is expired ({_retention_text(config)} of connector "
            f"{connector.name}): it can no longer be read; correct the job's watermark past it "
            "or raise the retention"
        )
        raised = f"tidemark_refuse({prefix} || commit_seq || {suffix})"
        settled = f"(CASE WHEN {expired} THEN {raised} ELSE true END)"
    retention = _retention(config)
    return ItemSource(
        relation="inventory_batch",
        uid="commit_seq",
        weight=(
            "CASE WHEN replaced_by_id IS NOT NULL THEN 0 "
            "WHEN jsonb_typeof(result -> 'bytes') = 'number' "
            "THEN greatest((result ->> 'bytes')::numeric, 0)::bigint ELSE weight END"
        ),
        item="id::text",
        where=["job_id = %s", "commit_seq IS NOT NULL"],
        params=[upstream.pk],
        settled=settled,
        config_field=f"config.{retention[0]}" if retention else "config.job",
    )


def expired_commit(connector, *, lower: int, upper: int | None = None) -> int | None:
    """The first upstream commit in [lower, upper) that is outside the retention, or None."""
    config = connector.config or {}
    upstream = _upstream(connector)
    expired = _expired_sql(upstream.pk, config)
    if expired == "false":
        return None
    return gateway.first_expired_commit(
        job_id=upstream.pk, lower=lower, upper=upper, expired=expired
    )


def _expired_error(connector, commit: int, *, field: str, what: str) -> InvalidInput:
    config = connector.config or {}
    return InvalidInput(
        field,
        f"{what} commit {commit} of job {config.get('job')}, which is expired "
        f"({_retention_text(config)} of connector {connector.name}): it can no longer be read",
    )


def check_replay(*, job: Job, position: int) -> None:
    """A downstream watermark may move back only to a retained commit (a correction's replay
    re-reads every commit from `position` on)."""
    connector = job.connector
    if connector.kind != ConnectorKind.JOB_OUTPUT:
        return
    commit = expired_commit(connector, lower=position)
    if commit is not None:
        raise _expired_error(
            connector, commit, field="value", what="replaying from there would re-read"
        )


# ---- what a downstream batch reads ---------------------------------------------------------------


def read_spec(*, connector, batch: Batch) -> dict:
    """The outputs of the upstream commits in the batch's range, in commit order.

    A commit whose output was replaced (a replay or backfill of the upstream job republished its
    rows) contributes nothing: those rows are in the replacing batch's output, a later commit.
    An output with no rows is left out (an empty directory has no schema to read).
    """
    upstream = _upstream(connector)
    lower, upper = batch.span.lower, batch.span.upper
    commit = expired_commit(connector, lower=lower, upper=upper)
    if commit is not None:
        field = f"config.{_retention(connector.config)[0]}"
        raise _expired_error(connector, commit, field=field, what=f"batch {batch.pk} reads")
    commits = list(
        Batch.objects.filter(
            job=upstream, commit_seq__isnull=False, commit_seq__gte=lower, commit_seq__lt=upper
        )
        .order_by("commit_seq")
        .values("id", "commit_seq", "replaced_by_id", "result", "config_snapshot")
    )
    outputs = []
    for row in commits:
        if row["replaced_by_id"] is not None:
            continue
        output = _output(upstream, row)
        if output is not None:
            outputs.append(output)
    return {
        "items": [str(row["id"]) for row in commits],
        "source": {
            "kind": ConnectorKind.JOB_OUTPUT,
            "job": upstream.name,
            "outputs": outputs,
            # the schema of a range whose commits wrote no rows
            "schema_from": _newest_output(upstream),
        },
    }


def _output(upstream: Job, row: dict) -> dict | None:
    sink = (row["config_snapshot"] or {}).get("sink", upstream.sink) or {}
    result = row["result"] or {}
    try:
        _check_readable_sink(upstream, sink)
    except InvalidInput as exc:
        raise InvalidInput(
            exc.field, f"commit {row['commit_seq']} (batch {row['id']}): {exc.message}"
        ) from None
    location = result.get("location")
    if not isinstance(location, str) or not location:
        raise InvalidInput(
            "config.job",
            f"commit {row['commit_seq']} (batch {row['id']}) of job {upstream.name} "
            "recorded no output location",
        )
    if result.get("rows_out") == 0:
        return None
    output = {
        "batch_id": row["id"],
        "commit_seq": row["commit_seq"],
        "location": location,
        "format": sink.get("format", "parquet"),
    }
    header = _sink_options(sink).get("header")
    if header is not None:
        output["options"] = {"header": str(header).lower()}
    return output


def _newest_output(upstream: Job) -> dict | None:
    newest = (
        Batch.objects.filter(
            job=upstream,
            commit_seq__isnull=False,
            replaced_by__isnull=True,
            result__rows_out__gt=0,
        )
        .order_by("-commit_seq")
        .values("id", "commit_seq", "replaced_by_id", "result", "config_snapshot")
        .first()
    )
    if newest is None:
        return None
    try:
        return _output(upstream, newest)
    except InvalidInput:
        return None


def _sink_options(sink: dict) -> dict[str, str]:
    """A files sink's writer options as its writer took them (names in any case); none when the
    sink's options are refused (its batches failed: no output of it is read)."""
    from workers.spark.options import OptionError, normalized_writer_options

    try:
        return normalized_writer_options(sink.get("format", "parquet"), sink.get("options"))
    except OptionError:
        return {}
