"""Where on this machine a user's names may point: under the deployment's allowed roots.

Every local path a user names (a files connector's directory, a files sink's directory, an
asset's location) passes `path_confined` when it is saved and again when it is used: the path is
resolved (`..` and every symlink, os.path.realpath) and must then lie under one of the
directories of the setting `TIDEMARK_ALLOWED_ROOTS` (by default the data folder). URLs are not
local paths (`file://` included): a files connector with a scheme is an object store, served by
sources/object_store.

`walk` is the one directory walk of a local connector: it never leaves its root (a directory
symlink that resolves outside it, or to a directory already walked, an ancestor included, is not
followed), and it stops with an error past a depth or an entry budget
(`TIDEMARK_WALK_MAX_DEPTH`, `TIDEMARK_WALK_MAX_ENTRIES`), so a landing directory full of
symlink loops cannot tie up a worker.
"""

import os
import stat
from collections.abc import Iterator, Mapping, MutableMapping, Set
from itertools import filterfalse
from operator import ne

from django.conf import settings

from inventory.services.errors import InvalidInput
from inventory.services.urls import url_scheme


def allowed_roots() -> list[str]:
    return [os.path.realpath(root) for root in settings.TIDEMARK_ALLOWED_ROOTS]


def own_directory(real: str) -> str | None:
    """The folder of Tidemark's own embedded servers (resolved in settings) that the resolved
    path `real` lies in: two string comparisons, cheap enough for every directory a walk meets."""
    for directory in settings.TIDEMARK_OWN_DIRECTORIES:
        if _under(real, directory):
            return directory
    return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def path_confined(path, field: str) -> str:
    """The resolved form of a local absolute `path` that lies under an allowed root; otherwise
    InvalidInput naming `field` (and, for a path outside the roots, the setting that allows it)."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput(field, "must be an absolute local path")
    if "\x00" in path:
        raise InvalidInput(field, "must not contain NUL characters")
    scheme = url_scheme(path)
    if scheme:
        raise InvalidInput(
            field, f"{scheme}: URLs are not local paths here; give an absolute directory path"
        )
    if not os.path.isabs(path):
        raise InvalidInput(field, f"{path} is not an absolute path")
    real = os.path.realpath(path)
    if any(_under(real, root) for root in allowed_roots()):
        own = own_directory(real)
        if own is not None:
            raise InvalidInput(
                field,
                f"{path} lies in {own}, Tidemark's own database or broker files (the embedded "
                "PostgreSQL or Redis): never a source or a sink",
            )
        return real
    raise InvalidInput(
        field,
        f"{path} lies outside the directories this deployment allows (after resolving .. and "
        "symlinks); an administrator allows a directory by adding it to the setting "
        "TIDEMARK_ALLOWED_ROOTS",
    )


def sink_outside_source(sink_path, source_path, *, source: str, field: str) -> None:
    """A files or Delta sink's directory never lies in (or is) the directory its own job's
    connector walks: a bare pattern matches at any depth, so every run would discover its own
    output as new files and read it back. Both paths are compared resolved; URLs are not."""
    if not isinstance(sink_path, str) or not isinstance(source_path, str):
        return
    if url_scheme(sink_path) or url_scheme(source_path):
        return
    if not (os.path.isabs(sink_path) and os.path.isabs(source_path)):
        return
    real, walked = os.path.realpath(sink_path), os.path.realpath(source_path)
    if _under(real, walked):
        raise InvalidInput(
            field,
            f"{sink_path} lies inside {walked}, the directory of connector {source}: the job "
            "would discover its own output as new files and read it again; write outside it",
        )


def location_within(location, *, base: str, field: str) -> str:
    """A local `location` confined (path_confined) and lying under the directory `base` (itself
    resolved): an asset of a files connector stays inside its connector's directory."""
    real = path_confined(location, field)
    real_base = os.path.realpath(base)
    if not _under(real, real_base) or real == real_base:
        raise InvalidInput(field, f"{location} is not inside the connector's directory {base}")
    return real


class WalkBudgetExceeded(InvalidInput):
    """A directory walk went past its depth or entry budget."""


def walk(
    root: str,
    *,
    field: str = "config.path",
    known: Mapping[str, Set[bytes]] | None = None,
    listings: MutableMapping[str, list] | None = None,
) -> Iterator[tuple[str, list[str]]]:
    """(directory, names of the files in it) for `root` and every directory below it that
    resolves inside `root`, each directory once.

    One `os.listdir` per directory; only the names not in `known[directory]` (the files a
    discovery registered there before, as the file system's bytes: `os.fsencode` of the name; a
    set difference) are looked at, one `lstat` each, and yielded: a scan of a directory of known
    files costs its listing and a set lookup per name. A known name is taken
    for the file it was (a directory that later takes a registered file's name is not walked).
    The directory is listed as bytes: no name is decoded but the unknown ones (`os.fsdecode`, as
    a listing by a `str` path decodes every name), and the set difference of bytes costs less
    than that of the same names as `str` (measured: docs/performance-notes.md, Discovery).

    `listings`, when given, keeps each directory's listing less its unknown names for the next
    walk with the same `known` (`unknown_names`: a listing is compared with the previous one in
    order, so most names cost a comparison with their neighbour in memory, not a hash probe).
    The caller keeps it only as long as `known` only grows (files/known.py: with its copy).
    Confinement is decided per directory: a directory reached without a symlink lies at its
    parent's resolved path plus its name; only a symlink is resolved (`os.path.realpath`)."""
    real_root = os.path.realpath(root)
    max_depth = settings.TIDEMARK_WALK_MAX_DEPTH
    max_entries = settings.TIDEMARK_WALK_MAX_ENTRIES
    known = known or {}
    seen = {real_root}
    entries_seen = 0
    pending = [(root, real_root, 0)]
    while pending:
        directory, real_directory, depth = pending.pop()
        try:
            listing = os.listdir(os.fsencode(directory))
        except OSError:
            if directory == root:
                raise
            continue  # a subdirectory that vanished or is unreadable: nothing of it to register
        entries_seen += len(listing)
        if entries_seen > max_entries:
            raise WalkBudgetExceeded(
                field,
                f"{root} holds more than {max_entries} entries; the walk stopped "
                "(setting TIDEMARK_WALK_MAX_ENTRIES)",
            )
        names = []
        skip = known.get(directory)
        if skip and listings is not None:
            unseen, listings[directory] = unknown_names(listing, listings.get(directory), skip)
        else:
            # a set difference (hashing and probing in C) costs a known file less than a filter
            # calling `skip.__contains__` per name
            unseen = set(listing) - skip if skip else listing
        for raw in unseen:
            name = os.fsdecode(raw)
            path = os.path.join(directory, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue  # gone since the listing
            if stat.S_ISLNK(mode):
                real = os.path.realpath(path)
                if not _under(real, real_root) or own_directory(real) is not None:
                    continue  # a symlink out of the root is never followed nor read
                if not os.path.isdir(real):
                    names.append(name)
                    continue
            elif stat.S_ISDIR(mode):
                real = os.path.join(real_directory, name)
                if own_directory(real) is not None:
                    continue  # the embedded database's or broker's files: never read
            else:
                names.append(name)
                continue
            if real in seen:
                continue  # a symlink back to a walked directory (an ancestor included)
            if depth + 1 > max_depth:
                raise WalkBudgetExceeded(
                    field,
                    f"{root} is nested deeper than {max_depth} directories; the walk "
                    "stopped (setting TIDEMARK_WALK_MAX_DEPTH)",
                )
            seen.add(real)
            pending.append((path, real, depth + 1))
        yield directory, names


# closes every listing `unknown_names` keeps, so two listings compared in step end together
_END = object()
# how far ahead in the previous listing a known name out of step is looked for (files deleted
# next to one another), and how many names out of step a comparison takes before the rest of
# the listing is taken by a set difference (a listing in another order than the previous one)
_LOOKAHEAD = 16
_OUT_OF_STEP = 256


def unknown_names(listing: list, previous: list | None, known: Set) -> tuple[list, list]:
    """(the names of `listing` that are not in `known`, the listing to pass as `previous` next
    time). `previous` is what an earlier call returned for the same directory and a `known` that
    has only grown since: every name in it is in `known`, and it ends with `_END`.

    A directory is listed in the same order from one look to the next for the names it still
    holds (the order of its entries on disk: a hash of the name on ext4 and XFS, the order of
    creation on btrfs and tmpfs), so the two listings are compared in step, in C (`map(ne, ...)`):
    a name equal to the previous listing's name at its place is known, without hashing it or
    reading `known`, whose names lie all over memory (at 1,000,000 names, a set difference waits
    on the memory for every name). Only a name out of step is looked up in `known`: unknown, it is
    new and the previous listing waits for the next name; known, the previous names up to it
    were deleted (looked for up to `_LOOKAHEAD` ahead), or it was registered by someone else.
    Past `_OUT_OF_STEP` such names (another order), the rest of the listing is taken by a set
    difference, which is what every look did before. A name is therefore reported unknown
    exactly when it is not in `known` whatever the order: the comparison in step only decides
    how fast. `listing` is consumed (the returned listing may be it)."""
    if previous is None:
        unseen = set(listing) - known
        kept = list(filterfalse(unseen.__contains__, listing)) if unseen else listing
        kept.append(_END)
        return list(unseen), kept
    listing.append(_END)
    size, previous_size = len(listing), len(previous)
    ahead, behind = iter(listing), iter(previous)
    out_of_step = []  # indexes in `listing` of the unknown names found in step
    rest: list = []  # unknown names of the rest of the listing (after too many out of step)
    steps = 0
    for _ in filter(None, map(ne, ahead, behind)):
        i = size - ahead.__length_hint__() - 1
        j = previous_size - behind.__length_hint__() - 1
        name = listing[i]
        if name is _END:
            break  # the listing ended: the previous names left were deleted
        steps += 1
        if previous[j] is _END or steps > _OUT_OF_STEP:
            rest = list(set(listing[i:-1]) - known)
            break
        if name not in known:
            out_of_step.append(i)
            behind.__setstate__(j)  # the previous name waits for the next listed one
            continue
        for k in range(j + 1, min(j + 1 + _LOOKAHEAD, previous_size - 1)):
            if previous[k] == name:
                behind.__setstate__(k + 1)  # previous[j:k] were deleted
                break
        else:
            behind.__setstate__(j)  # known but not listed before: registered meanwhile
    unseen = [listing[i] for i in out_of_step] + rest
    if rest:
        dropped = set(unseen)
        return unseen, list(filterfalse(dropped.__contains__, listing))
    if not out_of_step:
        return unseen, listing
    kept = []
    start = 0
    for i in out_of_step:
        kept += listing[start:i]
        start = i + 1
    kept += listing[start:]
    return unseen, kept
