"""Asset registration for `files` connectors, with ids in visibility order (invariant 5).

Registration holds the connector's row lock until it commits, so two registrations of one
connector never interleave: a reader resuming after id N can never later see a smaller id appear.
"""

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from django.db import connection, transaction

from inventory.models import Asset, Connector, ConnectorKind, ConnectorState
from inventory.services.errors import Conflict, InvalidInput
from inventory.sql import query

DEFAULT_PATTERNS = ["*.parquet", "*.json", "*.jsonl", "*.csv"]
log = logging.getLogger(__name__)


# When is a file in a watched directory complete (issue: a half-written CSV read once, never again)?
# - with `marker_suffix` (e.g. ".done"): when `<file><suffix>` exists (the producer says so);
# - else when it has not been modified for `settle_seconds`, or when its size and modification
#   time are unchanged across two looks `stable_probe_seconds` apart within one discovery.
DEFAULT_SETTLE_SECONDS = 5
DEFAULT_STABLE_PROBE_SECONDS = 0.25


def check_completion_config(config: dict) -> None:
    """InvalidInput naming the key when a files connector's completion settings are unusable."""
    for key, upper in (("settle_seconds", 86_400), ("stable_probe_seconds", 60)):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= upper:
            raise InvalidInput(f"config.{key}", f"must be a number of seconds from 0 to {upper}")
    marker = config.get("marker_suffix")
    if marker is not None and (not isinstance(marker, str) or not marker or "/" in marker):
        raise InvalidInput("config.marker_suffix", "must be a file name suffix such as '.done'")


def scan_directory(*, path: str, patterns: list[str] | None = None) -> list[tuple[str, int, dict]]:
    """Files under `path` matching `patterns`, oldest first, as (location, size, extra)."""
    root = Path(path)
    if not root.exists():
        raise InvalidInput("config.path", f"{path} does not exist")
    if not root.is_dir():
        raise InvalidInput("config.path", f"{path} is not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise InvalidInput("config.path", f"{path} is not readable by the Tidemark process")
    found = {}
    for pattern in patterns or DEFAULT_PATTERNS:
        for file in root.glob(pattern if "/" in pattern or "**" in pattern else f"**/{pattern}"):
            if file.is_file() and not file.name.startswith((".", "_")):
                stat = file.stat()
                found[str(file)] = (stat.st_mtime_ns, stat.st_size)
    ordered = sorted(found.items(), key=lambda item: (item[1][0], item[0]))
    return [(location, size, {"mtime_ns": mtime}) for location, (mtime, size) in ordered]


def _stat(location: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(location)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def complete_files(items: list[tuple[str, int, dict]], config: dict) -> list[tuple[str, int, dict]]:
    """The scanned files that are complete under the connector's rule (see above)."""
    marker = config.get("marker_suffix")
    if marker:
        return [
            item
            for item in items
            if not item[0].endswith(marker) and os.path.exists(item[0] + marker)
        ]
    settle_ns = int(float(config.get("settle_seconds", DEFAULT_SETTLE_SECONDS)) * 1e9)
    probe = float(config.get("stable_probe_seconds", DEFAULT_STABLE_PROBE_SECONDS))
    now_ns = time.time_ns()
    young = [item for item in items if now_ns - item[2]["mtime_ns"] < settle_ns]
    if not young:
        return items
    stable: set[str] = set()
    if probe > 0:
        time.sleep(probe)
        stable = {
            location
            for location, size, extra in young
            if _stat(location) == (extra["mtime_ns"], size)
        }
    settled = {item[0] for item in young}
    return [item for item in items if item[0] not in settled or item[0] in stable]


MAX_ANNOUNCED = 10_000  # items per producer call
MAX_LOCATION_LENGTH = 4096


@transaction.atomic
def assets_register(*, connector: Connector, items: list[tuple[str, int, dict]]) -> int:
    """Register new items (location, weight, extra) of a connector; known locations are left alone.

    Returns how many were new. Ids are handed out under the connector's row lock, and only to
    locations not registered yet (no id is spent on a known location).
    """
    for location, weight, _extra in items:
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise InvalidInput("weight", f"{location}: weight must be an integer, got {weight!r}")
        if weight < 0:
            raise InvalidInput("weight", f"{location}: weight must not be negative, got {weight}")
    Connector.objects.select_for_update().filter(pk=connector.pk).first()
    if not items:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            query("assets_register"),
            [
                connector.pk,
                [item[0] for item in items],
                [item[1] for item in items],
                [json.dumps(item[2]) for item in items],
                connector.pk,
            ],
        )
        return cursor.rowcount


@dataclass
class Announced:
    registered: int
    known: int
    assets: list[dict]


def _announced_items(items) -> list[tuple[str, int, dict]]:
    """Producer input -> (location, weight, extra); InvalidInput naming `assets[i].field`."""
    if not isinstance(items, list) or not items:
        raise InvalidInput("assets", "expected a non-empty list of {location, weight, extra}")
    if len(items) > MAX_ANNOUNCED:
        raise InvalidInput("assets", f"at most {MAX_ANNOUNCED} items per call, got {len(items)}")
    seen: dict[str, int] = {}
    parsed = []
    for index, item in enumerate(items):
        where = f"assets[{index}]"
        if not isinstance(item, dict):
            raise InvalidInput(where, "expected an object {location, weight, extra}")
        unknown = set(item) - {"location", "weight", "extra"}
        if unknown:
            raise InvalidInput(where, f"unknown key(s) {sorted(unknown)}")
        location = item.get("location")
        if not isinstance(location, str) or not location.strip():
            raise InvalidInput(f"{where}.location", "a non-empty string is required")
        if len(location) > MAX_LOCATION_LENGTH or "\x00" in location:
            raise InvalidInput(
                f"{where}.location", f"at most {MAX_LOCATION_LENGTH} characters, no NUL"
            )
        if location in seen:
            raise InvalidInput(f"{where}.location", f"repeats assets[{seen[location]}].location")
        seen[location] = index
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise InvalidInput(f"{where}.weight", f"must be an integer, got {weight!r}")
        if not 0 <= weight <= 2**63 - 1:
            raise InvalidInput(f"{where}.weight", f"must be between 0 and 2^63-1, got {weight}")
        extra = item.get("extra", {})
        if not isinstance(extra, dict):
            raise InvalidInput(f"{where}.extra", "must be an object")
        parsed.append((location, weight, extra))
    return parsed


def _registrable(connector: Connector) -> None:
    if connector.kind != ConnectorKind.FILES:
        raise InvalidInput("kind", f"connector {connector.name} is {connector.kind}, not files")
    if "meta_table" in (connector.config or {}):
        raise Conflict(
            f"connector {connector.name} reads the external meta table "
            f"{connector.config['meta_table']!r}: add rows there instead"
        )
    if connector.state == ConnectorState.COMPLETED:
        raise Conflict(f"connector {connector.name} is completed: its item set is closed")


def assets_announce(*, connector: Connector, items) -> Announced:
    """Register items a producer announces (`[{location, weight, extra}]`), in the given order.

    Idempotent: known locations keep their id and are reported as known. Ids follow visibility
    order (the connector's row lock, as for discovery).
    """
    _registrable(connector)
    parsed = _announced_items(items)
    with transaction.atomic():
        registered = assets_register(connector=connector, items=parsed)
        locations = [item[0] for item in parsed]
        ids = dict(
            Asset.objects.filter(connector=connector, location__in=locations).values_list(
                "location", "pk"
            )
        )
    return Announced(
        registered=registered,
        known=len(parsed) - registered,
        assets=[{"location": location, "id": ids[location]} for location in locations],
    )


def connector_discover_now(*, connector: Connector) -> int:
    """An operator's "look now": scan the connector's directory and register new files."""
    _registrable(connector)
    if connector.state == ConnectorState.PAUSED:
        raise Conflict(f"connector {connector.name} is paused; resume it first")
    return assets_discover(connector=connector)


def assets_discover(*, connector: Connector) -> int:
    """Scan a `files` connector's directory and register the complete files not seen before.

    A registered file that has changed since (size or modification time) is not registered
    again: it is logged and marked in its asset's `extra` (`changed_after_registration`)."""
    if connector.kind != ConnectorKind.FILES:
        raise InvalidInput("kind", f"connector {connector.name} is {connector.kind}, not files")
    config = connector.config or {}
    if "meta_table" in config:
        raise InvalidInput("config", f"connector {connector.name} reads an external meta table")
    path = config.get("path")
    if not path:
        raise InvalidInput("config.path", "a files connector needs a directory path")
    scanned = scan_directory(path=path, patterns=config.get("patterns"))
    known = _known_changes(connector, scanned)
    fresh = [item for item in scanned if item[0] not in known]
    return assets_register(connector=connector, items=complete_files(fresh, config))


def _known_changes(connector: Connector, scanned: list[tuple[str, int, dict]]) -> set[str]:
    """Locations already registered; those whose file changed since are flagged (once)."""
    if not scanned:
        return set()
    by_location = {location: (size, extra) for location, size, extra in scanned}
    known = set()
    for asset in Asset.objects.filter(connector=connector, location__in=list(by_location)).only(
        "pk", "location", "weight", "extra"
    ):
        known.add(asset.location)
        size, extra = by_location[asset.location]
        registered = asset.extra or {}
        if "mtime_ns" not in registered or "changed_after_registration" in registered:
            continue
        if (registered["mtime_ns"], asset.weight) != (extra["mtime_ns"], size):
            log.warning(
                "connector %s: %s changed after it was registered as asset %s (size %s -> %s); "
                "it is not read again: register the new content under a new name",
                connector.name,
                asset.location,
                asset.pk,
                asset.weight,
                size,
            )
            Asset.objects.filter(pk=asset.pk).update(
                extra={
                    **registered,
                    "changed_after_registration": {"size": size, "mtime_ns": extra["mtime_ns"]},
                }
            )
    return known
