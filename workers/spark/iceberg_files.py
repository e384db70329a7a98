"""The files an Iceberg table's metadata names, confined to the table's location. No Django here.

Iceberg metadata names every file by a full path or URI: the metadata file, each snapshot's
manifest list, the manifests, the data and delete files. Metadata is data anyone with write
access to the table or its catalog can edit, so before Tidemark opens, reads or even looks for a
file it names, the path is resolved the way the file system will (percent-decoding of a file://
URI, `..`, symlinks) and must lie inside the table's own location (`location` of its metadata);
anything else fails naming the snapshot and what named the file. Confinement is checked before
existence, and the error never says whether the outside path exists, so metadata cannot be used
to probe the file system. The same rule as a Delta log's (workers/spark/delta_log.py).

Only local tables are read: a location or a file on another scheme (s3://, hdfs://) is refused.
"""

import os
from urllib.parse import unquote, urlsplit

from workers.spark.errors import ReadError


class OutsideTable(ReadError):
    """Iceberg metadata names a file outside its table's location."""


def local_path(uri) -> str | None:
    """The local absolute path of a path or file:// URI as Iceberg metadata writes it; None for
    any other scheme, a host (another machine), a relative path or a NUL."""
    if not isinstance(uri, str) or not uri or "\x00" in uri:
        return None
    parts = urlsplit(uri)
    if parts.scheme:
        if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
            return None
        path = unquote(parts.path)
    else:
        path = uri
    if not path.startswith("/") or "\x00" in path:
        return None
    return path


def table_root(location: str, *, table: str) -> str:
    """The table's location as a resolved local directory; ReadError when it is not local."""
    path = local_path(location)
    if path is None:
        raise ReadError(
            f"the Iceberg table {table} lies at {location}, which is not a local directory "
            "(only local tables are read)"
        )
    return os.path.realpath(path)


def confined(location: str, uri, *, table: str, snapshot, what: str) -> str:
    """The resolved local file `uri` names, inside the table's `location`; OutsideTable naming
    the snapshot (None: the table's metadata) and `what` named the file otherwise."""
    root = table_root(location, table=table)
    path = local_path(uri)
    resolved = os.path.realpath(path) if path is not None else None
    if resolved is None or not resolved.startswith(root.rstrip("/") + "/"):
        where = f"snapshot {snapshot} of the Iceberg table {table}" if snapshot else table
        raise OutsideTable(
            f"{where} cannot be read: its {what} names a file outside the table's location, "
            "which Tidemark never reads (metadata edited by hand or written by another tool; "
            "expire the snapshot or rewrite the table)"
        )
    return resolved
