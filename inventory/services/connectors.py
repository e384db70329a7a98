"""Connectors: create with validated config, pause/resume, orchestration by `start_after`."""

import re

from django.db import transaction
from django.db.models import Q

from inventory.models import Connector, ConnectorKind, ConnectorState
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.items import check_meta_table

# Config keys that look like secrets must name an environment variable (`<key>_env`) instead.
SECRET_HINTS = (
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credentials",
    "jaas",
)
# A URL with a password in it (postgres://user:pw@host/db) holds a secret whatever its key.
_URL_WITH_PASSWORD = re.compile(r"://[^/@\s:]*:[^/@\s]+@")


def is_secret_key(key: str) -> bool:
    lowered = str(key).lower()
    return any(hint in lowered for hint in SECRET_HINTS) and not lowered.endswith("_env")


def check_no_secrets(value, path: str) -> None:
    """Refuse secrets anywhere in a config, nested objects and lists included."""
    if isinstance(value, dict):
        for key, inner in value.items():
            field = f"{path}.{key}"
            if is_secret_key(key):
                raise InvalidInput(
                    field,
                    f"secrets are not stored; put it in an environment variable and set {key}_env "
                    "to that variable's name",
                )
            if str(key).lower().endswith("_env") and not (
                isinstance(inner, str) and inner.isidentifier()
            ):
                raise InvalidInput(field, "must be the name of an environment variable")
            check_no_secrets(inner, field)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            check_no_secrets(inner, f"{path}[{index}]")
    elif isinstance(value, str) and _URL_WITH_PASSWORD.search(value):
        raise InvalidInput(
            path, "this URL contains a password; put the password in an environment variable"
        )


def validate_config(kind: str, config: dict) -> dict:
    if kind not in ConnectorKind.values:
        raise InvalidInput(
            "kind", f"unknown kind {kind!r}; use one of {', '.join(ConnectorKind.values)}"
        )
    if not isinstance(config, dict):
        raise InvalidInput("config", "must be an object")
    check_no_secrets(config, "config")
    if "meta_table" in config:
        check_meta_table(config["meta_table"])
    elif kind in (ConnectorKind.KAFKA, ConnectorKind.JOB_OUTPUT):
        # refused rather than accepted and never planned
        raise InvalidInput("kind", f"{kind} connectors are not supported yet")
    elif kind == ConnectorKind.TABLE:
        raise InvalidInput(
            "config.meta_table",
            "a table connector reads its table by an integer column: give meta_table "
            "{table, uid_column, item_column, weight_column (or null for weight 1)}",
        )
    elif kind == ConnectorKind.FILES and not config.get("path"):
        raise InvalidInput(
            "config.path", "a files connector needs a directory path (or a meta_table)"
        )
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
    state = ConnectorState.ACTIVE
    if start_after:
        state = ConnectorState.WAITING if not _predecessor_completed(start_after) else state
    return Connector.objects.create(
        name=name,
        kind=kind,
        config=config,
        labels=labels or [],
        start_after=start_after,
        state=state,
    )


def _predecessors(start_after: str):
    return Connector.objects.filter(Q(name=start_after) | Q(labels__contains=[start_after]))


def _predecessor_completed(start_after: str) -> bool:
    predecessors = _predecessors(start_after)
    return (
        predecessors.exists() and not predecessors.exclude(state=ConnectorState.COMPLETED).exists()
    )


@transaction.atomic
def connector_pause(*, connector: Connector) -> Connector:
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    if connector.state == ConnectorState.COMPLETED:
        raise Conflict(f"connector {connector.name} is completed; there is nothing to pause")
    connector.state = ConnectorState.PAUSED
    connector.save(update_fields=["state", "updated_at"])
    return connector


@transaction.atomic
def connector_resume(*, connector: Connector) -> Connector:
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    if connector.state == ConnectorState.COMPLETED:
        raise Conflict(f"connector {connector.name} is completed; it cannot be resumed")
    if connector.start_after and not _predecessor_completed(connector.start_after):
        connector.state = ConnectorState.WAITING
    else:
        connector.state = ConnectorState.ACTIVE
    connector.save(update_fields=["state", "updated_at"])
    return connector


def connectors_release_waiting() -> list[str]:
    """Activate waiting connectors whose `start_after` predecessors have all completed."""
    released = []
    for connector in Connector.objects.filter(state=ConnectorState.WAITING):
        if _predecessor_completed(connector.start_after):
            Connector.objects.filter(pk=connector.pk, state=ConnectorState.WAITING).update(
                state=ConnectorState.ACTIVE
            )
            released.append(connector.name)
    return released


_UNSET = object()


@transaction.atomic
def connector_update(
    *, connector: Connector, config=_UNSET, labels=_UNSET, start_after=_UNSET
) -> Connector:
    """Change a connector's config, labels or `start_after`; its name and kind are fixed."""
    connector = Connector.objects.select_for_update().get(pk=connector.pk)
    fields = []
    if config is not _UNSET:
        connector.config = validate_config(connector.kind, config or {})
        fields.append("config")
    if labels is not _UNSET:
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise InvalidInput("labels", "must be a list of non-empty strings")
        connector.labels = labels
        fields.append("labels")
    if start_after is not _UNSET:
        connector.start_after = start_after or ""
        fields.append("start_after")
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
    connector.delete()
