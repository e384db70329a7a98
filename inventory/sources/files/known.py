"""What a files connector has registered, as this process knows it, and the recheck of the files
registered lately (sources/files/ scans; sources/object_store shares the registered locations).

A discovery recognises registered files by name against this copy, so the walk neither stats
them nor sends them to the database again. The copy is kept current by two queries: the
connector's last asset (one index lookup: its id and its running count `cum_count`), and, when
that moved, the rows above the highest id seen (ids follow visibility order, invariant 5, so no
row can appear below it later). A count that does not add up (rows that left: a connector reset)
loads the copy again. What this process's own discovery registered is added as it commits, from
the rows the registration returned (`known_files_add`), so the next look does not read it back.

The recheck: a file registered before it was complete changes soon after, so the files
registered within `recheck_seconds` are stat-ed again and flagged once when their size or
modification time moved (`changed_after_registration`; restatements.changed_files_restate reads
the flag). Each scan stats at most `recheck_per_scan` of them, taken from a cursor that goes
round the window, so a scan costs the same however many files are in the window, and a file in
it is looked at within ceil(files in window / recheck_per_scan) scans of this process.
"""

import logging
import os
import sys
import threading
import time
from array import array
from dataclasses import dataclass, field

from django.db import connection

from inventory.models import Connector
from inventory.services.assets import Registered
from inventory.sql import gateway

log = logging.getLogger("inventory.sources.files")

DEFAULT_RECHECK_SECONDS = 3600
DEFAULT_RECHECK_PER_SCAN = 1000


class _Recent:
    """The recheck's files, in id order, as columns: ids, locations, sizes, mtime_ns and when
    each was registered (epoch seconds). The numbers sit in arrays, not in a tuple per file: a
    tuple of five is an object of the size of a file name's, so a window of many files left the
    memory of the names' size class half used, and every look's listing (one string per
    directory entry) was spread over twice the pages (the look inside the window was the slower
    one at 50,000 and at 1,000,000 files). The locations are the rows' own strings."""

    __slots__ = ("ids", "locations", "sizes", "mtimes", "ats")

    def __init__(self):
        self.ids = array("q")
        self.locations: list[str] = []
        self.sizes = array("q")
        self.mtimes = array("q")
        self.ats = array("d")

    def __len__(self) -> int:
        return len(self.ids)

    def append(self, pk: int, location: str, size: int, mtime_ns: int, at: float) -> None:
        self.ids.append(pk)
        self.locations.append(location)
        self.sizes.append(size)
        self.mtimes.append(mtime_ns)
        self.ats.append(at)

    def drop_front(self, count: int) -> None:
        for column in (self.ids, self.locations, self.sizes, self.mtimes, self.ats):
            del column[:count]

    def entries(self, start: int, stop: int) -> list[tuple[int, str, int, int, float]]:
        """(id, location, size, mtime_ns, registered at) of entries start..stop-1."""
        return list(
            zip(
                self.ids[start:stop],
                self.locations[start:stop],
                self.sizes[start:stop],
                self.mtimes[start:stop],
                self.ats[start:stop],
                strict=True,
            )
        )


@dataclass
class KnownFiles:
    count: int = 0
    max_id: int = 0
    # directory -> names registered in it, as the file system's bytes (`known_name`): the walk
    # lists a directory as bytes and compares them (confinement.walk)
    by_directory: dict[str, set[bytes]] = field(default_factory=dict)
    # directory -> its last listing less the names not registered (confinement.unknown_names:
    # the next listing is compared with it in step); valid while `by_directory` only grows, which
    # it does for the life of this object (a copy that lost rows is a new one)
    listings: dict[str, list] = field(default_factory=dict)
    # files registered lately, in id order (so in registration order): see _Recent
    recent: "_Recent" = field(default_factory=lambda: _Recent())
    # where the next recheck starts in `recent`
    cursor: int = 0
    # ids of `recent` flagged since they were loaded: not stat-ed again
    flagged: set[int] = field(default_factory=set)
    # whether the connector may have assets flagged as changed and not restated: the answer of
    # the last look's `assets_known_size` (which asks it in the same statement), or True once
    # this process flagged one since; read by the kind's after_discover (`changed_pending`)
    changed: bool = True


_known: dict[tuple[str, int], KnownFiles] = {}
_known_lock = threading.Lock()


def known_files_forget() -> None:
    """Drop this process's copies (the next look at each connector loads it again)."""
    with _known_lock:
        _known.clear()


def known_files(connector: Connector, *, recheck_seconds: float) -> KnownFiles:
    """This process's copy of the connector's registered locations, brought up to date."""
    key = (connection.settings_dict["NAME"], connector.pk)
    size = gateway.assets_known_size(connector_id=connector.pk)
    count, max_id = size.count, size.max_id
    with _known_lock:
        known = _known.get(key)
        if known is None or max_id < known.max_id or count < known.count:
            known = KnownFiles()
        if max_id > known.max_id:
            _load(connector, known, upto=max_id, recheck_seconds=recheck_seconds)
        if known.count != count:
            known = KnownFiles()
            _load(connector, known, upto=max_id, recheck_seconds=recheck_seconds)
        known.changed = size.changed
        _known[key] = known
        return known


def changed_pending(connector: Connector) -> bool:
    """Whether the check for changed files to restate (restatements.changed_files_restate) can
    find anything: False only when this process's last look at the connector found no flagged,
    unrestated asset (`assets_known_size`) and flagged none itself since. A flag raised by
    another process after that statement is found by the next look's."""
    with _known_lock:
        known = _known.get((connection.settings_dict["NAME"], connector.pk))
        return known is None or known.changed


def _load(connector: Connector, known: KnownFiles, *, upto: int, recheck_seconds) -> None:
    """Add the connector's rows in (known.max_id, upto]: every id up to `upto` is visible once
    `upto` is (invariant 5), so the copy then holds exactly the rows up to it."""
    rows = gateway.assets_known_since(
        connector_id=connector.pk, after=known.max_id, upto=upto, recheck_seconds=recheck_seconds
    )
    _add(known, rows)
    if not known.count:
        _compact(known.by_directory)
    known.count += len(rows)
    known.max_id = upto


_ENCODING, _ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def known_name(name: str) -> bytes:
    """A file name as `KnownFiles.by_directory` holds it: the bytes a listing by a bytes path
    returns for it (`os.fsencode`, the inverse of the decoding a listing by a `str` path makes,
    so a name compares the same either way; written out, as the object store calls it per key)."""
    return name.encode(_ENCODING, _ERRORS)


def _add(known: KnownFiles, rows) -> None:
    """Put rows (location, id or None, size, mtime_ns, registered at) into the copy: every
    location by its directory, and those with an id into the recheck's `recent` (in id order)."""
    by_directory = known.by_directory
    recent = known.recent
    for location, pk, size, mtime_ns, at in rows:
        directory, _, text = location.rpartition("/")
        name = known_name(text)
        names = by_directory.get(directory)
        if names is None:
            by_directory[directory] = {name}
        else:
            names.add(name)
        if pk is not None:
            recent.append(pk, location, size, mtime_ns, at)


def known_files_add(
    connector: Connector,
    known: KnownFiles,
    added: Registered,
    *,
    items: list[tuple[str, int, dict]],
    recheck_seconds: float,
) -> None:
    """After a registration of this process committed (assets.assets_register's `on_commit`): put
    the rows it added into the copy it was decided against, so the next look need not read them
    back. Only when they directly follow the copy (`added.previous_id` is the last id it holds):
    the added rows are then exactly the connector's rows up to the last of them (they were
    inserted under the connector's row lock). Otherwise (another registration came between, or
    the copy was loaded again meanwhile) the next look reads what it lacks, as it always did.

    `items` are the (location, size, extra) the registration was given: a row's size and
    `mtime_ns` for the recheck come from there. A new row is within `recheck_seconds` of its
    registration; as assets_known_since does, only rows with an `mtime_ns` go to the recheck."""
    given: dict[str, tuple[int, dict]] = {}
    for location, size, extra in items:
        given.setdefault(location, (size, extra))  # a location given twice counts at its first
    rows = []
    for pk, location, at in added.assets:
        size, extra = given[location]
        mtime_ns = extra.get("mtime_ns")
        recent = recheck_seconds > 0 and mtime_ns is not None
        rows.append((location, pk if recent else None, size, mtime_ns, at))
    key = (connection.settings_dict["NAME"], connector.pk)
    with _known_lock:
        if _known.get(key) is not known or known.max_id != added.previous_id:
            return
        _add(known, rows)
        known.count += len(rows)
        known.max_id = added.assets[-1][0]


def _compact(by_directory: dict[str, set[bytes]]) -> None:
    """Copy a first load's names next to one another in memory. Every scan probes the known set
    once per listed name, and between scans it leaves the CPU cache: names cut from the rows one
    by one lie scattered among the rows' other objects, and a probe then costs more (a set
    difference of 50,000 names, measured: a third less time on the copies)."""
    for directory, names in by_directory.items():
        by_directory[directory] = {known_name(os.fsdecode(name)) for name in names}


def _stat(location: str) -> os.stat_result:
    """The recheck's one system call per file (a name of its own, so tests count them)."""
    return os.stat(location)


def recent_recheck(
    connector: Connector, known: KnownFiles, *, recheck_seconds: float, per_scan: int
) -> int:
    """Flag (once) the recently registered files that changed after their registration; returns
    how many were stat-ed (at most `per_scan`).

    The entries are in registration order, so those that left the window sit at the front and
    are dropped there without a stat; the cursor then takes the next `per_scan` entries,
    wrapping round to the front."""
    horizon = time.time() - recheck_seconds
    with _known_lock:
        recent = known.recent
        ats = recent.ats
        gone = 0
        while gone < len(ats) and ats[gone] < horizon:
            gone += 1
        if gone:
            known.flagged.difference_update(recent.ids[:gone])
            recent.drop_front(gone)
            known.cursor = max(known.cursor - gone, 0)
        start = known.cursor if known.cursor < len(recent) else 0
        due = recent.entries(start, start + per_scan)
        if len(due) < per_scan and start:
            due += recent.entries(0, min(start, per_scan - len(due)))
        known.cursor = (start + len(due)) % len(recent) if len(recent) else 0
        flagged = set(known.flagged)
    stated = 0
    for pk, location, size, mtime_ns, at in due:
        if at < horizon or pk in flagged:
            continue  # left the window since (dropped when it reaches the front), or flagged
        stated += 1
        try:
            now = _stat(location)
        except OSError:
            continue  # gone: its jobs find out when they read it
        if now.st_mtime_ns == mtime_ns and now.st_size == size:
            continue
        with _known_lock:
            known.flagged.add(pk)
            known.changed = True  # (also when another process flagged it first)
        _flag(connector, pk=pk, location=location, size=size, now=(now.st_mtime_ns, now.st_size))
    return stated


def _flag(connector: Connector, *, pk: int, location: str, size: int, now: tuple[int, int]) -> None:
    changed = {"size": now[1], "mtime_ns": now[0]}
    if gateway.asset_flag_changed(asset_id=pk, change=changed):
        log.warning(
            "connector %s: %s changed after it was registered as asset %s (size %s -> %s); "
            "the jobs that committed it read it again (a restatement)",
            connector.name,
            location,
            pk,
            size,
            now[1],
        )
