"""Connectors: create with validated config, pause/resume, orchestration by `start_after`."""

from django.db import transaction
from django.db.models import Q

from inventory.models import Connector, ConnectorKind, ConnectorState
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.items import check_meta_table

# Config keys that look like secrets must name an environment variable (`<key>_env`) instead.
SECRET_HINTS = ("password", "secret", "token", "api_key", "credentials")


def validate_config(kind: str, config: dict) -> dict:
    if kind not in ConnectorKind.values:
        raise InvalidInput(
            "kind", f"unknown kind {kind!r}; use one of {', '.join(ConnectorKind.values)}"
        )
    if not isinstance(config, dict):
        raise InvalidInput("config", "must be an object")
    for key, value in config.items():
        lowered = key.lower()
        if any(hint in lowered for hint in SECRET_HINTS) and not lowered.endswith("_env"):
            raise InvalidInput(
                f"config.{key}",
                f"secrets are not stored; put it in an environment variable and set {key}_env "
                "to that variable's name",
            )
        if lowered.endswith("_env") and not (isinstance(value, str) and value.isidentifier()):
            raise InvalidInput(f"config.{key}", "must be the name of an environment variable")
    if "meta_table" in config:
        check_meta_table(config["meta_table"])
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
