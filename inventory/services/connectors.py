"""Connectors: create with validated config, pause/resume, orchestration by `start_after`."""

from django.db import transaction

from inventory.models import (
    Backfill,
    BackfillStatus,
    Batch,
    BatchStatus,
    Connector,
    ConnectorKind,
    ConnectorState,
    Job,
    WatermarkSource,
)
from inventory.services import lifecycle, watermarks
from inventory.services.config_keys import check_discover_seconds
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.job_config import sink_outside_own_source
from inventory.services.orchestration import (
    check_followers_kept,
    check_labels,
    check_start_after,
    connector_transition,
    predecessors_completed,
)
from inventory.services.reasons import reason_checked
from inventory.services.secrets import check_no_secrets
from inventory.sources.registry import kind_for


def validate_config(kind: str, config: dict) -> dict:
    if kind not in ConnectorKind.values:
        raise InvalidInput(
            "kind", f"unknown kind {kind!r}; use one of {', '.join(ConnectorKind.values)}"
        )
    if not isinstance(config, dict):
        raise InvalidInput("config", "must be an object")
    check_no_secrets(config, "config")
    check_discover_seconds(config)
    # the kind's own checks: a directory, an object store, a table or meta table, a topic, ...
    config = kind_for(kind, config).validate(config, connector_kind=kind)
    if not isinstance(config.get("snapshot", False), bool):
        raise InvalidInput("config.snapshot", "must be true or false")
    patterns = config.get("patterns")
    if patterns is not None and not (
        isinstance(patterns, list) and all(isinstance(p, str) and p for p in patterns)
    ):
        raise InvalidInput("config.patterns", "must be a list of glob patterns")
    return config


def connector_create(
    *,
    name: str,
    kind: str,
    config: dict | None = None,
    labels: list[str] | None = None,
    start_after: str = "",
) -> Connector:
    config = validate_config(kind, config or {})
    if Connector.objects.filter(name=name).exists():
        raise Conflict(f"a connector named {name!r} already exists")
    check_start_after(name=name, labels=labels or [], start_after=start_after, field="start_after")
    state = ConnectorState.ACTIVE
    if start_after:
        state = ConnectorState.WAITING if not predecessors_completed(start_after) else state
    return Connector.objects.create(
        name=name,
        kind=kind,
        config=config,
        labels=labels or [],
        start_after=start_after,
        state=state,
    )


@transaction.atomic
def connector_pause(*, connector: Connector, actor: str = "") -> Connector:
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    if connector.state == ConnectorState.COMPLETED:
        raise Conflict(f"connector {connector.name} is completed; there is nothing to pause")
    connector_transition(connector, ConnectorState.PAUSED, actor=actor, reason="paused")
    return connector


@transaction.atomic
def connector_resume(*, connector: Connector, actor: str = "") -> Connector:
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    if connector.state == ConnectorState.COMPLETED:
        raise Conflict(f"connector {connector.name} is completed; it cannot be resumed")
    if connector.start_after and not predecessors_completed(connector.start_after):
        reason = f"resumed; waits for {connector.start_after!r} to complete"
        connector_transition(connector, ConnectorState.WAITING, actor=actor, reason=reason)
    else:
        connector_transition(connector, ConnectorState.ACTIVE, actor=actor, reason="resumed")
    return connector


_UNSET = object()


@transaction.atomic
def connector_update(
    *, connector: Connector, config=_UNSET, labels=_UNSET, start_after=_UNSET
) -> Connector:
    """Change a connector's config, labels or `start_after`; its name and kind are fixed, and so
    is its source identity while jobs read from it (connector_reset changes it explicitly)."""
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    fields = []
    if config is not _UNSET:
        config = validate_config(connector.kind, config or {})
        kind = kind_for(connector.kind, config)
        kind.check_config_change(connector=connector, config=config, reset=False)
        changed = kind.identity_changes(connector.config, config)
        jobs = list(connector.jobs.order_by("name").values_list("name", flat=True)[:5])
        if changed and jobs:
            raise InvalidInput(
                changed[0],
                f"changing it re-points job(s) {', '.join(jobs)} at other data while their "
                "watermarks stay where the old source left them; reset the connector instead "
                "(POST connectors/{name}/reset/ with the new config and a reason: the jobs' "
                "watermarks start over)",
            )
        connector.config = config
        fields.append("config")
    if labels is not _UNSET:
        check_labels(labels)
        check_followers_kept(connector=connector, labels=labels)
        connector.labels = labels
        fields.append("labels")
    if start_after is not _UNSET:
        connector.start_after = start_after or ""
        fields.append("start_after")
    if "labels" in fields or "start_after" in fields:
        check_start_after(
            name=connector.name,
            labels=connector.labels,
            start_after=connector.start_after,
            field="start_after" if "start_after" in fields else "labels",
            named="start_after" in fields,
        )
    if fields:
        connector.save(update_fields=[*fields, "updated_at"])
    return connector


@transaction.atomic
def connector_delete(*, connector: Connector) -> None:
    """Delete a connector and its assets; refused while jobs still read from it."""
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    jobs = list(connector.jobs.values_list("name", flat=True)[:5])
    if jobs:
        raise Conflict(
            f"connector {connector.name} is used by job(s) {', '.join(jobs)}; delete them first"
        )
    check_followers_kept(connector=connector, deleted=True)
    connector.delete()


# batches of a reset connector's jobs: not started yet -> cancelled; finished -> superseded
_RESET_SUPERSEDED = (BatchStatus.SUCCEEDED, BatchStatus.DEAD, BatchStatus.SKIPPED)
_OPEN_BACKFILLS = (BackfillStatus.RUNNING, BackfillStatus.PAUSED)


@transaction.atomic
def connector_reset(
    *,
    connector: Connector,
    config: dict,
    actor: str,
    reason: str,
    source: str = WatermarkSource.API,
) -> Connector:
    """Give a connector a new config, source identity included, and start its jobs over.

    Every job of the connector goes back to its start position: its waiting batches and open
    backfills are cancelled, its finished batches superseded, and its watermark reset, recorded
    as a replay event with the actor and the reason. Assets registered from an old `path` are
    forgotten, and so are those of a source read from a cursor (a table, a topic, a prefix, a
    remote meta table), which is looked at again from its configured start. Output already
    written to sinks stays. Refused while a batch of these jobs runs.
    Locks: connector, then jobs -> watermark -> backfill -> batch (the lock order of lifecycle.py).
    """
    reason = reason_checked(reason, needed="resetting a connector needs a reason")
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    config = validate_config(connector.kind, config or {})
    kind = kind_for(connector.kind, config)
    kind.check_config_change(connector=connector, config=config, reset=True)
    changed = kind.identity_changes(connector.config, config)
    jobs = list(Job.objects.select_for_update().filter(connector=connector).order_by("pk"))
    for job in jobs:
        try:
            sink_outside_own_source(job.sink, connector, config=config)
        except InvalidInput as exc:
            raise InvalidInput("config.path", f"job {job.name}'s sink: {exc.message}") from None
    running = (
        Batch.objects.filter(job__in=jobs, status=BatchStatus.RUNNING)
        .select_related("job")
        .order_by("pk")
        .first()
    )
    if running is not None:
        raise Conflict(
            f"batch {running.pk} of job {running.job.name} is running; pause the jobs and let "
            "it finish (or cancel it) before resetting the connector"
        )
    what = ", ".join(changed) if changed else "same source"
    for job in jobs:
        watermark = watermarks.watermark_lock(job.pk)
        backfills = Backfill.objects.select_for_update().filter(job=job, status__in=_OPEN_BACKFILLS)
        lifecycle.backfills_transition(
            list(backfills.order_by("pk").values_list("pk", flat=True)),
            from_statuses=_OPEN_BACKFILLS,
            to=BackfillStatus.CANCELLED,
        )
        batches = Batch.objects.filter(job=job)
        locked = list(batches.select_for_update().order_by("pk").values_list("pk", flat=True))
        batches = Batch.objects.filter(pk__in=locked)
        lifecycle.batches_cancel_waiting(
            batches, error={"type": "ConnectorReset", "message": f"{actor}: {reason}"}
        )
        lifecycle.batches_supersede(batches.filter(status__in=_RESET_SUPERSEDED))
        watermarks.watermark_record(
            watermark,
            new_position=job.start_position,
            new_value=None,
            source=source,
            batch=None,
            actor=actor,
            reason=f"connector {connector.name} reset ({what}): {reason}",
            replay=True,
        )
    fields = ["config", "updated_at"]
    if kind.cursor_restarts and connector.cursor:
        # a source read from a cursor (table values, topic offsets, listed keys, uids) is looked
        # at again from its configured start: the items registered from the old cursor go
        connector.assets.all().delete()
        connector.cursor = {}
        fields.append("cursor")
    elif "config.path" in changed:
        connector.assets.all().delete()
    connector.config = config
    connector.save(update_fields=fields)
    return connector
