"""A `files` connector over a local directory: scan, pattern match, completeness, and the
discovery that registers what is new (assets.py hands out the ids).

The worker reads the listed files with workers/spark/sources/files.py. An object-store path is
the `object_store` kind (inventory/sources/object_store/), which shares the patterns, the
completeness rule and the per-process copy of registered locations (known.py).
"""

import fnmatch
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from inventory.models import Connector, ConnectorKind
from inventory.services.assets import assets_register
from inventory.services.confinement import path_confined, walk
from inventory.services.errors import InvalidInput
from inventory.sources.files.known import (
    DEFAULT_RECHECK_PER_SCAN,
    DEFAULT_RECHECK_SECONDS,
    known_files,
    known_files_add,
    recent_recheck,
)

DEFAULT_PATTERNS = ["*.parquet", "*.json", "*.jsonl", "*.csv"]


# When is a file in a watched directory complete (issue: a half-written CSV read once, never again)?
# - with `marker_suffix` (e.g. ".done"): when `<file><suffix>` exists (the producer says so);
# - else when it has not been modified for `settle_seconds`, or when its size and modification
#   time are unchanged across two looks `stable_probe_seconds` apart within one discovery.
DEFAULT_SETTLE_SECONDS = 5
DEFAULT_STABLE_PROBE_SECONDS = 0.25

# what a local directory's config may hold: discovery's and completeness's settings here, the
# workers' read (workers/specs.py), the schedule (services/scheduling.py), snapshots; any other key
# is a typo reported (sources/config.py: check_known_keys), never a setting ignored
DIRECTORY_KEYS = (
    "path",
    "patterns",
    "marker_suffix",
    "settle_seconds",
    "stable_probe_seconds",
    "recheck_seconds",
    "recheck_per_scan",
    "discover_seconds",
    "snapshot",
    "format",
    "read_options",
    "schema",
    "lineage",
    "watermark_column",
)


def check_completion_config(config: dict) -> None:
    """InvalidInput naming the key when a files connector's completion settings are unusable."""
    limits = (
        ("settle_seconds", 86_400),
        ("stable_probe_seconds", 60),
        ("recheck_seconds", 2_592_000),
    )
    for key, upper in limits:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= upper:
            raise InvalidInput(f"config.{key}", f"must be a number of seconds from 0 to {upper}")
    per_scan = config.get("recheck_per_scan")
    if per_scan is not None and (
        isinstance(per_scan, bool) or not isinstance(per_scan, int) or not 1 <= per_scan <= 10**6
    ):
        raise InvalidInput("config.recheck_per_scan", "must be a whole number from 1 to 1000000")
    marker = config.get("marker_suffix")
    if marker is not None and (not isinstance(marker, str) or not marker or "/" in marker):
        raise InvalidInput("config.marker_suffix", "must be a file name suffix such as '.done'")


def _check_root(path: str) -> None:
    path_confined(path, "config.path")
    root = Path(path)
    if not root.exists():
        raise InvalidInput("config.path", f"{path} does not exist")
    if not root.is_dir():
        raise InvalidInput("config.path", f"{path} is not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise InvalidInput("config.path", f"{path} is not readable by the Tidemark process")


def _walk(root: str) -> Iterator[tuple[str, list[str]]]:
    """(directory, names of the non-directories in it) for `root` and every directory below it
    that stays inside it (confinement.walk: no symlink out or back, bounded)."""
    return walk(root, field="config.path")


class _Patterns:
    """A connector's `patterns`: a bare pattern matches a file name at any depth; one with a `/`
    or `**` matches the path relative to the connector's directory, segment by segment."""

    def __init__(self, patterns: list[str] | None):
        self.names = []
        self.paths = []
        for pattern in patterns or DEFAULT_PATTERNS:
            if "/" in pattern or "**" in pattern:
                self.paths.append([part for part in pattern.split("/") if part])
            else:
                self.names.append(pattern)

    def match(self, relative: str, name: str) -> bool:
        if name.startswith((".", "_")):
            return False
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.names):
            return True
        parts = relative.split("/")
        return any(_match_parts(parts, pattern) for pattern in self.paths)


def _relative_directory(directory: str, root: str) -> str:
    """A walked directory relative to the connector's, ending in "/" ("" for the directory
    itself): a name in it is matched as this plus the name, one relpath per directory."""
    relative = os.path.relpath(directory, root)
    return "" if relative == "." else relative + "/"


def _match_parts(parts: list[str], pattern: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match_parts(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and (
        fnmatch.fnmatchcase(parts[0], pattern[0]) and _match_parts(parts[1:], pattern[1:])
    )


def _file_stat(location: str) -> tuple[int, int] | None:
    """(mtime_ns, size) of a regular file, None for anything else or a file gone meanwhile."""
    try:
        found = os.stat(location)
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode):
        return None
    return found.st_mtime_ns, found.st_size


def _oldest_first(found: dict[str, tuple[int, int]]) -> list[tuple[str, int, dict]]:
    ordered = sorted(found.items(), key=lambda item: (item[1][0], item[0]))
    return [(location, size, {"mtime_ns": mtime}) for location, (mtime, size) in ordered]


def scan_directory(*, path: str, patterns: list[str] | None = None) -> list[tuple[str, int, dict]]:
    """Files under `path` matching `patterns`, oldest first, as (location, size, extra)."""
    _check_root(path)
    wanted = _Patterns(patterns)
    found = {}
    for directory, names in _walk(path):
        under = _relative_directory(directory, path)
        for name in names:
            location = os.path.join(directory, name)
            if wanted.match(under + name, name):
                stat_ = _file_stat(location)
                if stat_ is not None:
                    found[location] = stat_
    return _oldest_first(found)


def _stat(location: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(location)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def complete_files(items: list[tuple[str, int, dict]], config: dict) -> list[tuple[str, int, dict]]:
    """The scanned files that are complete under the connector's rule (see above)."""
    per_scan = config.get("recheck_per_scan")
    if per_scan is not None and (
        isinstance(per_scan, bool) or not isinstance(per_scan, int) or not 1 <= per_scan <= 10**6
    ):
        raise InvalidInput("config.recheck_per_scan", "must be a whole number from 1 to 1000000")
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


def directory_discover(*, connector: Connector) -> int:
    """Scan a `files` connector's directory and register the complete files not seen before.

    The scan costs one directory listing plus work for what changed: files already registered
    are recognised by name against this process's copy of the connector's registered locations
    (known.py: kept current by one index lookup, plus a query bounded by what was
    registered since the last look), so the walk (confinement.walk) neither stats them nor
    sends them to the database again. Only new names are matched against the patterns, stat-ed
    and checked for completeness.

    A registered file that has changed since (size or modification time) is not registered
    again: it is logged and marked in its asset's `extra` (`changed_after_registration`). That
    check needs a stat per file, so it is made for files registered in the last
    `recheck_seconds` (connector config, default 1 hour): a file registered before it was
    complete changes soon after; one rewritten much later is still never read again, but is
    no longer flagged. Each scan stats at most `recheck_per_scan` of those files (connector
    config, default 1000), from a cursor that goes round them, so the scan costs the same
    however many files are in the window: a file in the window is rechecked within
    ceil(files in window / recheck_per_scan) scans of this process (known.py)."""
    if connector.kind != ConnectorKind.FILES:
        raise InvalidInput("kind", f"connector {connector.name} is {connector.kind}, not files")
    config = connector.config or {}
    if "meta_table" in config:
        raise InvalidInput("config", f"connector {connector.name} reads an external meta table")
    path = config.get("path")
    if not path:
        raise InvalidInput("config.path", "a files connector needs a directory path")
    _check_root(path)
    recheck = float(config.get("recheck_seconds", DEFAULT_RECHECK_SECONDS))
    known = known_files(connector, recheck_seconds=recheck)
    wanted = _Patterns(config.get("patterns"))
    found = {}
    walked = walk(path, field="config.path", known=known.by_directory, listings=known.listings)
    for directory, unseen in walked:
        under = _relative_directory(directory, path)
        for name in unseen:
            location = os.path.join(directory, name)
            if wanted.match(under + name, name):
                stat_ = _file_stat(location)
                if stat_ is not None:
                    found[location] = stat_
    per_scan = int(config.get("recheck_per_scan", DEFAULT_RECHECK_PER_SCAN))
    recent_recheck(connector, known, recheck_seconds=recheck, per_scan=per_scan)
    if not found:
        return 0  # nothing new: no transaction, no connector row lock
    items = complete_files(_oldest_first(found), config)
    return assets_register(
        connector=connector,
        items=items,
        on_commit=lambda added: known_files_add(
            connector, known, added, items=items, recheck_seconds=recheck
        ),
    )
