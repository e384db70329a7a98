"""The spec a batch's Spark side reads: plain JSON-able data built from the batch, its job, its
connector's source module (inventory/sources/) and the job's config snapshot."""

from inventory.models import Batch, ConnectorKind
from inventory.services import capabilities, outputs
from inventory.services.job_config import sink_outside_own_source
from inventory.services.own_database import own_database_identity
from inventory.sources.items import ItemSource, fetch_items
from inventory.sources.registry import connector_source, source_for_connector
from workers.spark.errors import ReadError, SinkError
from workers.spark.options import (
    OptionError,
    normalized_reader_options,
    normalized_writer_options,
)

_FORMAT_BY_SUFFIX = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}


def batch_spec(*, batch: Batch, source: ItemSource | None = None) -> dict:
    """Everything the Spark side needs for one batch, as plain JSON-able data.

    Items: the locations of the connector's items in the batch's span, in id order. The processor,
    its params and the sink come from the batch's config snapshot, so a retry runs what the first
    attempt ran even if the job was edited since. `source`: the connector's item source when the
    caller has built it already (a worker's acquire did).
    """
    job = batch.job
    connector = job.connector
    config = connector.config or {}
    snapshot = batch.config_snapshot or {}
    module = connector_source(connector)
    if module is not None:
        # object stores, tables, topics, upstream jobs: the source module says what to read
        read = module.read_spec(connector=connector, batch=batch)
        items = read["items"]
    else:
        source = source or source_for_connector(connector)
        sql, params = source.select(lower=batch.span.lower, upper=batch.span.upper, limit=None)
        items = [row[2] for row in fetch_items(source, sql, params)]
        if connector.kind == ConnectorKind.FILES:
            # files the worker opens: inside the connector's directory, under the allowed roots
            items = capabilities.local_items(items, base=config.get("path"))
        read = {}
    spec = {
        "job": job.name,
        "batch_id": batch.pk,
        "kind": batch.kind,
        "lower": batch.span.lower,
        "upper": batch.span.upper,
        "items": items,
        "format": _format(config, items, connector.kind),
        # Spark gets the allowlisted option names only (checked again on every batch: a
        # connector saved before the allowlist fails here, before Spark, naming the key)
        "read_options": _read_options(config, items, connector.kind),
        "schema": config.get("schema"),
        "lineage": bool(config.get("lineage", False)),
        "watermark_column": config.get("watermark_column"),
        "processor": snapshot.get("processor", job.processor),
        "params": snapshot.get("params", job.params) or {},
        "sink": snapshot.get("sink", job.sink) or {},
        # a table sink refuses to write when its connection lands here (invariant 10)
        **(
            {"own_database": own_database_identity()}
            if (snapshot.get("sink", job.sink) or {}).get("kind") in ("postgres", "iceberg")
            else {}
        ),
        "attempt": batch.attempt,
        "watermark_type": job.watermark_type,
        # the sink publishes only through the fence, which names the outputs this one replaces
        "fence": outputs.fence_spec(),
        **({"source": read["source"]} if "source" in read else {}),
    }
    _check_sink_options(spec["sink"])
    # checked against the deployment's settings now, whatever they were when the job was saved
    capabilities.spec_confine(spec)
    sink_outside_own_source(spec["sink"], connector)
    return spec


def _format(config: dict, items: list[str], kind: str) -> str:
    return config.get("format") or _guess_format(items, kind)


def _read_options(config: dict, items: list[str], kind: str) -> dict[str, str]:
    try:
        return normalized_reader_options(_format(config, items, kind), config.get("read_options"))
    except OptionError as exc:
        raise ReadError(f"the connector's read_options: {exc}") from None


def _check_sink_options(sink: dict) -> None:
    """A files sink's writer options, by the one allowlist (a job saved before it: the batch
    fails here, before Spark, naming the key)."""
    if isinstance(sink, dict) and sink.get("kind") == "files":
        try:
            normalized_writer_options(sink.get("format", "parquet"), sink.get("options"))
        except OptionError as exc:
            raise SinkError(f"the job's sink options: {exc}") from None


def _guess_format(items: list[str], kind: str) -> str:
    """A files connector without `format`: the format its items' suffixes name, the same for
    every item that has one (parquet when none has). Items of different formats in one batch are
    an error naming them: read as one format, some would be misread."""
    if kind != ConnectorKind.FILES:
        return "parquet"
    found: dict[str, str] = {}
    for item in items:
        for suffix, fmt in _FORMAT_BY_SUFFIX.items():
            if str(item).lower().endswith(suffix):
                found.setdefault(fmt, str(item))
                break
    if len(found) > 1:
        named = ", ".join(f"{item} ({fmt})" for fmt, item in sorted(found.items()))
        raise ReadError(
            f"the batch's files are in different formats by their suffixes: {named}; set the "
            "connector's `format`, and `patterns` that match only files of that format"
        )
    return next(iter(found), "parquet")
