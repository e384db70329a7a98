"""The spec a batch's Spark side reads: plain JSON-able data built from the batch, its job, its
connector's source kind (inventory/sources/) and the job's config snapshot."""

from inventory.models import Batch
from inventory.services import capabilities, outputs
from inventory.services.job_config import sink_outside_own_source
from inventory.services.own_database import own_database_identity
from inventory.sources.base import ItemSource
from inventory.sources.registry import kind_of
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
    kind = kind_of(connector)
    read = kind.read_spec(connector, batch, source=source)  # what the worker reads, and how
    items = read["items"]
    guess = kind.reads_files(connector)  # a format from the items' suffixes when none is set
    spec = {
        "job": job.name,
        "batch_id": batch.pk,
        "kind": batch.kind,
        "lower": batch.span.lower,
        "upper": batch.span.upper,
        "items": items,
        "format": _format(config, items, guess),
        # Spark gets the allowlisted option names only (checked again on every batch: a
        # connector saved before the allowlist fails here, before Spark, naming the key)
        "read_options": _read_options(config, items, guess),
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


def _format(config: dict, items: list[str], guess: bool) -> str:
    return config.get("format") or _guess_format(items, guess)


def _read_options(config: dict, items: list[str], guess: bool) -> dict[str, str]:
    try:
        return normalized_reader_options(_format(config, items, guess), config.get("read_options"))
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


def _guess_format(items: list[str], guess: bool) -> str:
    """A files connector without `format`: the format its items' suffixes name, the same for
    every item that has one (parquet when none has). Items of different formats in one batch are
    an error naming them: read as one format, some would be misread. `guess`: the connector's
    items are files (its kind's `reads_files`); anything else reads as parquet."""
    if not guess:
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
