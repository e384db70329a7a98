"""Connector orchestration: snapshots that complete, connectors that wait for them, and hand-over.

- A connector in snapshot mode (`config.snapshot: true`: a table, a directory or a prefix up to the
  point captured on its first look) becomes `completed` once discovery has registered everything
  up to that point and every job of the connector has committed all of it.
- A connector with `start_after` (a connector's name or label) waits until every connector it
  names is completed, then becomes `active`.
- History then live: a `kafka` connector that follows a `table` connector can take its starting
  offsets from the history's data (`config.handover: {"partition_column", "offset_column"}`: the
  topic position each history row was synced from). Its first offset per partition is the
  history's largest synced offset + 1, so no message is read twice and none is skipped.

Every state change is a ConnectorEvent (old state, new state, actor, reason), shown in the API, the
admin and the dashboard. Locks: one connector row at a time.
"""

from django.db import transaction
from django.db.models import Max, Q

from inventory.models import Asset, Connector, ConnectorEvent, ConnectorState, Job
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.urls import refuse_control_characters

SYSTEM = "orchestration"


@transaction.atomic
def connector_transition(
    connector: Connector, new_state: str, *, actor: str, reason: str, expect: str | None = None
) -> bool:
    """Move a connector to `new_state` (only from `expect`, when given) and record why."""
    locked = Connector.objects.select_for_update().get(pk=connector.pk)
    if locked.state == new_state or (expect is not None and locked.state != expect):
        return False
    ConnectorEvent.objects.create(
        connector=locked, old_state=locked.state, new_state=new_state, actor=actor, reason=reason
    )
    locked.state = new_state
    locked.save(update_fields=["state", "updated_at"])
    connector.state = new_state
    return True


def predecessors(start_after: str):
    return Connector.objects.filter(Q(name=start_after) | Q(labels__contains=[start_after]))


def predecessors_completed(start_after: str) -> bool:
    found = predecessors(start_after)
    return found.exists() and not found.exclude(state=ConnectorState.COMPLETED).exists()


def start_after_circle(*, name: str, labels: list[str], start_after: str) -> list[str] | None:
    """The connectors through which `name`, given these labels and `start_after`, would wait for
    itself (`[name, ..., name]`), or None. Such a connector could never be released: each one
    of the circle waits for the next to complete."""
    if not start_after:
        return None
    waits_for = {}
    named = {}  # a name or a label -> the connectors it names
    for other, other_labels, other_after in Connector.objects.values_list(
        "name", "labels", "start_after"
    ):
        if other == name:
            continue
        waits_for[other] = other_after
        for key in {other, *(other_labels or [])}:
            named.setdefault(key, []).append(other)
    waits_for[name] = start_after
    for key in {name, *labels}:
        named.setdefault(key, []).append(name)
    paths = {name: [name]}
    pending = [name]
    while pending:
        current = pending.pop()
        for predecessor in named.get(waits_for[current] or "", []):
            if predecessor == name:
                return [*paths[current], name]
            if predecessor not in paths:
                paths[predecessor] = [*paths[current], predecessor]
                pending.append(predecessor)
    return None


def check_labels(labels) -> list[str]:
    """A connector's labels: a list of non-blank strings of at most 100 characters, with no
    control characters (a label is shown on pages and in metrics and named by `start_after`)."""
    if not isinstance(labels, list):
        raise InvalidInput("labels", "must be a list of non-empty strings")
    for i, label in enumerate(labels):
        field = f"labels[{i}]"
        if not isinstance(label, str) or not label.strip():
            raise InvalidInput(field, "must be a non-empty string")
        if len(label) > 100:
            raise InvalidInput(field, "must be at most 100 characters")
        refuse_control_characters(label, field=field)
    return labels


def check_start_after(
    *, name: str, labels: list[str], start_after: str, field: str, named: bool = True
) -> None:
    """Refuse a `start_after` that names no other connector or label (`named`: when it is the
    field being set), or one (or labels) by which a connector would wait for itself."""
    check_labels(labels)
    refuse_control_characters(start_after, field="start_after")
    circle = start_after_circle(name=name, labels=labels, start_after=start_after)
    if circle:
        how = (
            "it names the connector itself"
            if len(circle) == 2
            else "each of these waits for the next to complete"
        )
        raise InvalidInput(
            field,
            f"connector {name} would wait for itself ({' -> '.join(circle)}): {how}, so none "
            "would ever start",
        )
    if named and start_after and not predecessors(start_after).exclude(name=name).exists():
        raise InvalidInput(
            "start_after",
            f"{start_after!r} names no connector and no connector's label; the connector would "
            "wait for it for ever (create that connector first, or give an existing name or label)",
        )


def followers_left_waiting(
    *, connector: Connector, labels: list[str] | None = None, deleted: bool = False
) -> list[tuple[str, str]]:
    """The (connector, start_after) of others that would name nothing once `connector` is
    deleted (`deleted`) or keeps only `labels`: the names it gives up that no other connector
    still answers to."""
    kept = set() if deleted else {connector.name, *(labels or [])}
    given_up = {connector.name, *(connector.labels or [])} - kept
    if not given_up:
        return []
    others = Connector.objects.exclude(pk=connector.pk)
    left = []
    for name, start_after in (
        others.filter(start_after__in=sorted(given_up))
        .order_by("name")
        .values_list("name", "start_after")
    ):
        if not predecessors(start_after).exclude(pk=connector.pk).exists():
            left.append((name, start_after))
    return left


def check_followers_kept(
    *, connector: Connector, labels: list[str] | None = None, deleted: bool = False
) -> None:
    """Refuse (409) a label removal or a delete that leaves others' start_after naming nothing."""
    left = followers_left_waiting(connector=connector, labels=labels, deleted=deleted)
    if left:
        shown = ", ".join(f"{name} (start_after {after!r})" for name, after in left)
        what = "deleting it" if deleted else "removing that label"
        raise Conflict(
            f"connector {connector.name} is named by the start_after of {shown}; {what} would "
            "leave them waiting for ever: change their start_after first"
        )


def snapshot_committed(connector: Connector) -> str | None:
    """Why a snapshot connector is complete (None: not yet): all of its snapshot is registered
    and every one of its jobs committed every registered item."""
    if not (connector.config or {}).get("snapshot"):
        return None
    if not (connector.cursor or {}).get("snapshot_closed"):
        return None
    jobs = list(Job.objects.filter(connector=connector).select_related("watermark"))
    if not jobs:
        return None
    last = Asset.objects.filter(connector=connector).aggregate(last=Max("id"))["last"]
    if last is None:
        return "its snapshot holds no items"
    behind = [job.name for job in jobs if job.watermark.position <= last]
    if behind:
        return None
    return f"every item of its snapshot (up to asset {last}) is committed by {len(jobs)} job(s)"


def snapshots_complete() -> list[str]:
    completed = []
    for connector in Connector.objects.filter(state=ConnectorState.ACTIVE).order_by("pk"):
        reason = snapshot_committed(connector)
        if reason and connector_transition(
            connector,
            ConnectorState.COMPLETED,
            actor=SYSTEM,
            reason=f"snapshot completed: {reason}",
            expect=ConnectorState.ACTIVE,
        ):
            completed.append(connector.name)
    return completed


def waiting_release() -> list[str]:
    """Activate waiting connectors whose predecessors all completed (taking a hand-over position
    first, so the connector's first look already starts there)."""
    released = []
    for connector in Connector.objects.filter(state=ConnectorState.WAITING).order_by("pk"):
        if not predecessors_completed(connector.start_after):
            continue
        reason = f"every connector named by start_after {connector.start_after!r} is completed"
        handover = _handover(connector)
        if handover:
            reason += f"; {handover}"
        if connector_transition(
            connector,
            ConnectorState.ACTIVE,
            actor=SYSTEM,
            reason=reason,
            expect=ConnectorState.WAITING,
        ):
            released.append(connector.name)
    return released


def _handover(connector: Connector) -> str:
    """What a released connector takes from its predecessors (its kind's `hand_over`: a
    following kafka connector's first offsets from its history's data); says what it set."""
    from inventory.sources.registry import kind_of

    kind = kind_of(connector)
    if not (connector.config or {}).get("handover") or connector.cursor:
        return ""
    earlier = [(c, kind_of(c)) for c in predecessors(connector.start_after).order_by("pk")]
    return kind.hand_over(connector, earlier)


def orchestrate() -> dict:
    """The orchestration step (beat): complete snapshots, then release what waited for them."""
    completed = snapshots_complete()
    released = waiting_release()
    return {"completed": completed, "released": released}
