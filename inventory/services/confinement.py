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
from collections.abc import Iterator, Mapping, Set

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
    root: str, *, field: str = "config.path", known: Mapping[str, Set[bytes]] | None = None
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
        # a set difference (hashing and probing in C) costs a known file less than a filter
        # calling `skip.__contains__` per name: the known set is the one structure a scan reads
        # that the listing does not, and it is seldom still in the CPU cache
        for raw in set(listing) - skip if skip else listing:
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
