"""Asset registration, with ids in visibility order (invariant 5): what a scan of a local
directory (inventory/sources/files/), an announcement (announcements.py) or a source kind's discovery found.

Registration holds the connector's row lock until it commits, so two registrations of one
connector never interleave: a reader resuming after id N can never later see a smaller id appear.
"""

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction

from inventory.models import Connector
from inventory.services.confinement import location_within
from inventory.services.errors import InvalidInput
from inventory.services.urls import (
    is_object_store_path,
    refuse_control_characters,
    url_parse,
    url_scheme,
)
from inventory.sql import gateway

log = logging.getLogger(__name__)


MAX_ANNOUNCED = 10_000  # items per producer call
# a location is a key of the unique index (connector, location), whose rows PostgreSQL caps at
# 2704 bytes (btree); a longer one that does not compress failed the insert with a 500
MAX_LOCATION_BYTES = 2500


@dataclass(frozen=True)
class Registered:
    """What one registration added: the connector's last asset id before it (0: none) and the new
    rows, (id, location, registered at in epoch seconds), in id order. While the connector's row
    lock is held no other asset of it can appear, so these are exactly its assets in
    (`previous_id`, the last id here]."""

    previous_id: int
    assets: list[tuple[int, str, float]]


def unstorable(location: str) -> str | None:
    """Why a location cannot be an asset's, or None: PostgreSQL stores UTF-8 text only (a file
    name in another encoding reaches Python as lone surrogates), and the unique index on
    (connector, location) takes at most MAX_LOCATION_BYTES of it."""
    try:
        size = len(location.encode())
    except UnicodeEncodeError:
        return "is not UTF-8 text (a name in another encoding); rename the file"
    if size > MAX_LOCATION_BYTES:
        return (
            f"is {size} bytes; a location is registered up to {MAX_LOCATION_BYTES} bytes as "
            "stored (the limit of the index that keeps locations unique)"
        )
    return None


def assets_register(
    *,
    connector: Connector,
    items: list[tuple[str, int, dict]],
    on_commit: Callable[[Registered], None] | None = None,
) -> int:
    """Register new items (location, weight, extra) of a connector; known locations are left alone.

    Returns how many were new. Ids are handed out under the connector's row lock (taken even when
    `items` is empty, and held until the outermost transaction commits), and only to locations
    not registered yet (no id is spent on a known location). `on_commit`, when given, is called
    with what was added once that transaction has committed, and not at all when nothing was
    added or the transaction rolls back.
    """
    storable = []
    for item in items:
        reason = unstorable(item[0])
        if reason is None:
            storable.append(item)
            continue
        # one such file must not stop the registration of the others (a discovery that failed
        # on it would register nothing of the connector again); it is named in the log instead
        log.warning(
            "connector %s: %s %s; it is not registered",
            connector.name,
            item[0].encode("utf-8", "backslashreplace").decode(),
            reason,
        )
    items = storable
    for location, weight, _extra in items:
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise InvalidInput("weight", f"{location}: weight must be an integer, got {weight!r}")
        if weight < 0:
            raise InvalidInput("weight", f"{location}: weight must not be negative, got {weight}")
    rows = gateway.assets_register(
        connector_id=connector.pk,
        locations=[item[0] for item in items],
        weights=[item[1] for item in items],
        extras=[item[2] for item in items],
    )
    if rows and on_commit is not None:
        added = Registered(
            previous_id=rows[0].previous_id,
            assets=[(row.id, row.location, row.discovered_at) for row in rows],
        )
        # robust: a failing callback is logged, and the registration it follows stays done
        transaction.on_commit(lambda: on_commit(added), robust=True)
    return len(rows)


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
        unknown = sorted(set(item) - {"location", "weight", "extra"})
        if unknown:
            # named as every call names a key it does not take: the key, then what it takes
            raise InvalidInput(
                f"{where}.{unknown[0]}",
                "unknown key; an asset takes extra, location, weight"
                + (f" (also unknown: {', '.join(unknown[1:])})" if unknown[1:] else ""),
            )
        location = item.get("location")
        if not isinstance(location, str) or not location.strip():
            raise InvalidInput(f"{where}.location", "a non-empty string is required")
        # what reaches pages and operators' terminals as it is: the names rule (control
        # characters, invisible ones that reorder text; NUL among them)
        refuse_control_characters(location, field=f"{where}.location")
        if location.endswith("/"):
            raise InvalidInput(f"{where}.location", "names a directory; announce its files")
        _check_location_size(location, field=f"{where}.location")
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


def _check_location_size(location: str, *, field: str) -> None:
    reason = unstorable(location)
    if reason:
        raise InvalidInput(field, reason)


def location_inside(location: str, *, base, field: str) -> None:
    """An announced location lies inside its connector's location: for an object store, a key
    under its prefix (same scheme and bucket, no `..`); for a local directory, a path inside it
    after resolving `..` and symlinks (a relative location is relative to the directory)."""
    if not isinstance(base, str) or not base:
        raise InvalidInput(field, "the connector has no location to register assets under")
    if is_object_store_path(base):
        given, root = url_parse(location, field=field), url_parse(base, field=field)
        prefix = root.path.rstrip("/") + "/"
        if (
            (given.scheme, given.netloc) != (root.scheme, root.netloc)
            or not given.path.startswith(prefix)
            or ".." in given.path.split("/")
        ):
            raise InvalidInput(field, f"{location} is not under the connector's prefix {base}")
        return
    if url_scheme(location):
        raise InvalidInput(field, f"{location} is a URL; give a path inside {base}")
    location_within(os.path.join(base, location), base=base, field=field)


def canonical_location(location: str, *, base: str) -> str:
    """The one spelling of an announced location: for a local directory, the path discovery
    gives the same file (the connector's `path` joined with the location's path inside it, no
    `.`, `..` or doubled `/`), so one file never gets two ids; an object-store key as given (its
    keys are strings, `a//b` is not `a/b`)."""
    if is_object_store_path(base):
        return location
    inside = os.path.relpath(os.path.normpath(os.path.join(base, location)), os.path.normpath(base))
    return os.path.join(base, inside)
