"""The files a Delta log names, confined to the table's directory. No Django here.

A Delta log's actions name files by a URI-encoded path relative to the table, or by an absolute
URI (the protocol allows both). A log is data anyone with write access to the table can edit, so
before Tidemark opens, reads or even looks for a file a log names, the path is resolved the way
the file system will (percent-decoding, `..`, symlinks) and must stay inside the table's own
directory; anything else fails the batch naming the version and the action. Confinement is checked
before existence and the error never says whether the outside path exists, so the log cannot be
used to probe the file system.

Checked for every path an action carries: `add`, `remove` and `cdc` files, a deletion vector
stored at a path (`storageType` "p"; "u" is a name inside the table, "i" is inline) and a
checkpoint's sidecar files.
"""

import os
from urllib.parse import unquote, urlsplit

from workers.spark.errors import ReadError

# the actions whose `path` names a file of the table, and where a deletion vector may hang
_FILE_ACTIONS = ("add", "remove", "cdc", "sidecar")


class OutsideTable(ReadError):
    """A Delta log names a file outside its table's directory."""


def table_root(table: str) -> str:
    """The table directory as the file system resolves it (symlinks followed)."""
    return os.path.realpath(table)


def resolve(table: str, logged: str, *, version: int, action: str) -> str:
    """The absolute file `logged` (a path as a Delta log writes it) names, inside `table`;
    OutsideTable naming `version` and `action` when it is anywhere else or cannot be a file
    path. Nothing here touches the named file except to resolve the symlinks on its way."""
    return confined(table, _local(logged, table_root(table)), version=version, action=action)


def confined(table: str, path: str | None, *, version: int, action: str) -> str:
    """`path` (an absolute local path) resolved, when it is inside `table`; else OutsideTable."""
    root = table_root(table)
    resolved = os.path.realpath(path) if path is not None else None
    if resolved is None or not resolved.startswith(root.rstrip("/") + "/"):
        raise OutsideTable(
            f"version {version} of the Delta table {table} cannot be read: its {action} action "
            "names a file outside the table's directory, which Tidemark never reads (a log "
            "edited by hand or written by another tool; remove the version or rewrite the table)"
        )
    return resolved


def confine_actions(table: str, actions: list[dict], *, version: int) -> None:
    """Every file path that `actions` (one version's commit) name, confined to `table`."""
    for entry in actions:
        for action in _FILE_ACTIONS:
            body = entry.get(action) if isinstance(entry, dict) else None
            if not isinstance(body, dict):
                continue
            if "path" in body:
                resolve(
                    table,
                    _text(body["path"], table, version, action),
                    version=version,
                    action=action,
                )
            vector = body.get("deletionVector")
            if isinstance(vector, dict) and vector.get("storageType") == "p":
                resolve(
                    table,
                    _text(vector.get("pathOrInlineDv"), table, version, f"{action} deletionVector"),
                    version=version,
                    action=f"{action} deletionVector",
                )


def _text(value, table: str, version: int, action: str) -> str:
    if not isinstance(value, str) or not value:
        raise OutsideTable(
            f"version {version} of the Delta table {table} cannot be read: its {action} action "
            "names no file path"
        )
    return value


def _local(logged: str, root: str) -> str | None:
    """The local file path of a logged path: relative ones under `root`, absolute ones only as
    `file:` URIs; None for any other scheme, a NUL or a host (another machine)."""
    parts = urlsplit(logged)
    if parts.scheme:
        if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
            return None
        path = unquote(parts.path)
        if not path.startswith("/"):
            return None
    else:
        path = unquote(logged)
        if path.startswith("/"):
            return None  # a bare absolute path is not a Delta log path
        path = os.path.join(root, path)
    if "\x00" in path:
        return None
    return path
