"""What a job may name for running: processors, their params, sinks, executors, schedules.

Checked when a job is created or changed (services/jobs.py), so a bad name is a 400 that names the
field instead of a failed batch later. The Spark side's own checks are imported lazily: importing
this module starts no Spark.
"""

import importlib

from django.conf import settings

from inventory.models import RestatementPolicy
from inventory.services.capabilities import sink_confine
from inventory.services.config_keys import check_known_keys
from inventory.services.confinement import sink_outside_source
from inventory.services.cron import parse_cron
from inventory.services.errors import InvalidInput
from inventory.services.own_database import sink_refuse_own_database
from inventory.sources.registry import kind_for

EXECUTORS = ("warm", "submit")


def processors_load() -> list[str]:
    """The registered processor names, after loading the installed packages' `tidemark.processors`
    entry points and importing TIDEMARK_PROCESSOR_MODULES."""
    from workers.spark.processors import load_entry_points, processor_names

    load_entry_points()
    for module in settings.TIDEMARK_PROCESSOR_MODULES:
        importlib.import_module(module)
    return processor_names()


def job_validate_runtime(
    *,
    processor=None,
    params=None,
    sink=None,
    executor=None,
    schedule_cron=None,
    schedule_seconds=None,
    max_concurrency=None,
    restatements=None,
    connector=None,
    max_attempts=None,
    lease_seconds=None,
) -> None:
    """Check what a job names for running (given fields only); InvalidInput names the field.

    An empty sink is allowed: a job processed outside Tidemark (acquire/succeed) writes nowhere
    Tidemark knows of; a worker run of such a job fails with the sink error stored."""
    if sink:
        from workers.spark.errors import SinkError
        from workers.spark.sinks import SINK_KEYS, check_sink

        kind = sink.get("kind")
        if isinstance(kind, str) and kind in SINK_KEYS:
            check_known_keys(sink, SINK_KEYS[kind], kind=f"{kind} sink", field="sink")
        try:
            check_sink(sink)
        except SinkError as exc:
            field = getattr(exc, "field", None)
            raise InvalidInput(f"sink.{field}" if field else "sink", str(exc)) from None
        sink_confine(sink)
        if connector is not None:
            sink_outside_own_source(sink, connector)
        if sink.get("kind") == "postgres":
            sink_refuse_own_database(sink)
        if sink.get("kind") == "iceberg" and sink.get("catalog_dsn_env") is not None:
            # the catalog's database takes the catalog's commits: never Tidemark's own
            try:
                sink_refuse_own_database({"dsn_env": sink["catalog_dsn_env"]})
            except InvalidInput as exc:
                raise InvalidInput("sink.catalog_dsn_env", exc.message) from None
    if processor is not None:
        from workers.spark.processors import ProcessorError, validate_params

        known = processors_load()
        if processor not in known:
            raise InvalidInput(
                "processor",
                f"unknown processor {processor!r}; registered: {', '.join(known) or 'none'}",
            )
        try:
            validate_params(processor, params if params is not None else {})
        except ProcessorError as exc:
            param = getattr(exc, "param", None)
            raise InvalidInput(f"params.{param}" if param else "params", str(exc)) from None
    if restatements is not None and restatements not in RestatementPolicy.values:
        raise InvalidInput(
            "restatements",
            f"must be one of {', '.join(RestatementPolicy.values)}, got {restatements!r}",
        )
    if executor is not None and executor not in EXECUTORS:
        raise InvalidInput(
            "executor", f"unknown executor {executor!r}; use one of {', '.join(EXECUTORS)}"
        )
    if schedule_cron:
        parse_cron(schedule_cron)
    if max_concurrency is not None and (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise InvalidInput(
            "max_concurrency",
            f"must be at least 1 (batches of the job that may run at once), got {max_concurrency!r}",
        )
    for field, value, meaning in (
        ("max_attempts", max_attempts, "attempts a batch gets before it is dead"),
        ("lease_seconds", lease_seconds, "how long a worker holds a batch between heartbeats"),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise InvalidInput(field, f"must be at least 1 ({meaning}), got {value!r}")
    if schedule_seconds is not None and (
        isinstance(schedule_seconds, bool)
        or not isinstance(schedule_seconds, int)
        or schedule_seconds < 1
    ):
        raise InvalidInput(
            "schedule_seconds", f"must be a positive integer, got {schedule_seconds!r}"
        )


def sink_outside_own_source(sink: dict, connector, *, config: dict | None = None) -> None:
    """A files or Delta sink does not write into the local directory its connector walks
    (`config`: the connector's config about to be saved, by default its current one)."""
    config = connector.config if config is None else config
    config = config or {}
    if not isinstance(sink, dict) or sink.get("kind") not in ("files", "delta"):
        return
    walked = kind_for(connector.kind, config).walked_path(config)
    if not walked:
        return  # e.g. a meta table's items are listed by the table, not by a walk of `path`
    sink_outside_source(sink.get("path"), walked, source=connector.name, field="sink.path")
