"""`files` connectors over an object store: `s3://bucket/prefix` (s3fs) or any fsspec URL.

Config: `path` (the URL), `endpoint_url`, `region`, `key_env` / `secret_env` / `session_token_env`
(names of environment variables holding the credentials, never the values), `listing`
(`start_after` or `full`), `spark_native`, and the files connector's `format`, `patterns`,
`read_options`, `schema`, `lineage`, `watermark_column`, `marker_suffix`, `settle_seconds`.

Discovery cost follows what is new, not what was ever registered: an S3 prefix is listed with
ListObjectsV2 `StartAfter` the last key discovery has decided on, kept in `Connector.cursor`
(`{"path": ..., "start_after": key}`) and saved in the transaction that registers the new objects,
under the connector's row lock. The price: an object whose key sorts at or before the cursor when
it lands is never seen. Producers must write keys in increasing order (date-partitioned prefixes,
sequence-numbered names); where they cannot, `listing: "full"` lists the whole prefix on every look
and compares it, in memory, with the registered locations (as a local directory is scanned).
Any other fsspec filesystem is always listed in full.

An object is complete when listed: `settle_seconds` (default 0) waits until its LastModified is
that old, `marker_suffix` until `<key><suffix>` exists. The cursor never passes an object that is
still waiting for either.

An object rewritten under its key after registration is a *restatement*: each look also lists the
objects registered within `recheck_seconds` (default 1 hour; `start_after` listing: from the oldest
of them) and compares ETag, size and LastModified with what was registered. A changed object gets
its new ETag and size, and `changed_after_registration`; `restatements.changed_files_restate` then
restates it in every job that committed it, once per change.
"""

import logging
import time

from django.db import transaction

from inventory.models import Asset, Batch, Connector
from inventory.services import assets
from inventory.services.urls import url_parse, url_scheme
from inventory.sources import files
from inventory.sources.config import check_known_keys
from inventory.sources.files import known as files_known
from inventory.sources.object_store.access import (
    CREDENTIAL_KEYS,
    S3_SCHEMES,
    check_keys,
    check_scheme,
    fsspec_root,
    list_page,
    probe_fsspec,
    probe_s3,
    s3_filesystem,
    s3_location,
)
from inventory.sql import gateway

log = logging.getLogger(__name__)

PAGE_SIZE = 1000


# ---- config ------------------------------------------------------------------------------------


# a local directory's keys but the two its stat-based checks read, and the store's own
KEYS = (
    *(
        key
        for key in files.DIRECTORY_KEYS
        if key not in ("stable_probe_seconds", "recheck_per_scan")
    ),
    "endpoint_url",
    "region",
    *CREDENTIAL_KEYS,
    "listing",
    "spark_native",
)


def validate(config: dict) -> dict:
    """The config checked, and the bucket reached with it (InvalidInput naming `config.<key>`)."""
    check_known_keys(config, KEYS, kind="files (object store)")
    path = config.get("path")
    scheme = url_parse(path, field="config.path").scheme if isinstance(path, str) else ""
    check_keys(config, scheme)
    files.check_completion_config(config)
    if scheme in S3_SCHEMES:
        probe_s3(config)
    else:
        probe_fsspec(config)
    return config


# ---- discovery ---------------------------------------------------------------------------------


def discover(connector: Connector) -> int:
    """One look at the prefix: register the complete objects not registered yet."""
    config = connector.config or {}
    scheme = url_scheme(config["path"])
    if scheme in S3_SCHEMES and config.get("listing", "start_after") == "start_after":
        return _discover_after_cursor(connector, config)
    return _discover_full(connector, config, scheme)


def list_s3(fs, *, bucket: str, prefix: str, start_after: str = ""):
    """Every object under `prefix` whose key sorts after `start_after`, in key order, one
    ListObjectsV2 page at a time: {"Key", "Size", "ETag", "LastModified"}. A page that gets no
    answer within access.LIST_TIMEOUT_SECONDS fails the look (InvalidInput naming config.path)."""
    request = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_SIZE}
    if start_after:
        request["StartAfter"] = start_after
    while True:
        page = list_page(fs, **request)
        yield from page.get("Contents", ())
        if not page.get("IsTruncated"):
            return
        request.pop("StartAfter", None)
        request["ContinuationToken"] = page["NextContinuationToken"]


def _stored_cursor(connector: Connector, path: str) -> str:
    """The connector's start-after key for this path ("" before the first look, or after the
    path changed: a cursor belongs to the prefix it was taken on)."""
    cursor = Connector.objects.filter(pk=connector.pk).values_list("cursor", flat=True).first()
    cursor = cursor or {}
    return cursor.get("start_after", "") if cursor.get("path") == path else ""


def _discover_after_cursor(connector: Connector, config: dict) -> int:
    path = config["path"]
    bucket, prefix = s3_location(path)
    fs = s3_filesystem(config)
    start_after = _stored_cursor(connector, path)
    recent = _recent_objects(connector, config)
    begin = start_after
    if recent:
        # one listing for the recheck and what is new: from the oldest recently registered key
        # on (a key's proper prefix sorts before it)
        begin = min(begin, min(recent)[len(f"s3://{bucket}/") :][:-1])
    everything = [
        (f"s3://{bucket}/{obj['Key']}", obj["Key"][len(prefix) :], obj)
        for obj in list_s3(fs, bucket=bucket, prefix=prefix, start_after=begin)
    ]
    _recheck(connector, recent, everything)
    listed = [entry for entry in everything if entry[2]["Key"] > start_after]
    items, decided = _decide(listed, config)
    log.info(
        "connector %s: %d objects listed after %r, %d complete",
        connector.name,
        len(listed),
        start_after,
        len(items),
    )
    cursor = listed[decided][2]["Key"] if decided >= 0 else ""
    with transaction.atomic():
        registered = assets.assets_register(connector=connector, items=items)
        # under the connector's row lock (taken by assets_register): a slower concurrent look
        # that listed less never moves the cursor back
        if cursor > _stored_cursor(connector, path):
            Connector.objects.filter(pk=connector.pk).update(
                cursor={"path": path, "start_after": cursor}
            )
    return registered


def _decide(listed: list[tuple[str, str, dict]], config: dict):
    """(complete objects to register, in listing order; the index of the last object of the
    decided run, -1 if none) for `listed` = [(location, path relative to the prefix, object)].

    An object is decided when it is registered now or never will be (not matched, a marker);
    the cursor stops before the first object still waiting to be complete, so that one is
    listed again next time."""
    wanted = files._Patterns(config.get("patterns"))
    marker = config.get("marker_suffix")
    locations = {location for location, _relative, _obj in listed}
    settle = float(config.get("settle_seconds", 0))
    now = time.time()
    items, decided, waiting = [], -1, False
    for index, (location, relative, obj) in enumerate(listed):
        if not _matches(wanted, relative) or (marker and location.endswith(marker)):
            decided = decided if waiting else index
            continue
        complete = (not marker or location + marker in locations) and (
            settle <= 0 or now - obj["LastModified"].timestamp() >= settle
        )
        if not complete:
            waiting = True
            continue
        items.append((location, int(obj["Size"]), _extra(obj)))
        decided = decided if waiting else index
    return items, decided


def _matches(wanted, relative: str) -> bool:
    parts = relative.split("/")
    # Spark's `_temporary/`, `_SUCCESS`, hidden files: never data
    if any(part.startswith((".", "_")) for part in parts) or not parts[-1]:
        return False
    return wanted.match(relative, parts[-1])


def _extra(obj: dict) -> dict:
    modified = obj["LastModified"]
    return {
        "etag": str(obj.get("ETag") or "").strip('"'),
        "last_modified": modified.isoformat(),
        "mtime_ns": int(modified.timestamp() * 1_000_000_000),
    }


def _discover_full(connector: Connector, config: dict, scheme: str) -> int:
    """List everything under the path; only names not registered yet are considered (compared
    with this process's copy of the registered locations, as for a local directory)."""
    if scheme in S3_SCHEMES:
        bucket, prefix = s3_location(config["path"])
        fs = s3_filesystem(config)
        listed = [
            (f"s3://{bucket}/{obj['Key']}", obj["Key"][len(prefix) :], obj)
            for obj in list_s3(fs, bucket=bucket, prefix=prefix)
        ]
    else:
        check_scheme(config["path"], scheme)
        fs, root = fsspec_root(config["path"])
        listed = [
            (fs.unstrip_protocol(name), name[len(root) + 1 :], _as_listed(info))
            for name, info in sorted(fs.find(root, detail=True).items())
            if info.get("type") == "file"
        ]
    _recheck(connector, _recent_objects(connector, config), listed)
    known = files_known.known_files(connector, recheck_seconds=0)
    unseen = []
    for entry in listed:
        directory, _, name = entry[0].rpartition("/")
        if files_known.known_name(name) not in known.by_directory.get(directory, ()):
            unseen.append(entry)
    items, _decided = _decide(unseen, config)
    return assets.assets_register(connector=connector, items=items)


def _recent_objects(connector: Connector, config: dict) -> dict:
    """location -> (id, weight, extra) of the objects registered within `recheck_seconds`."""
    seconds = float(config.get("recheck_seconds", files.DEFAULT_RECHECK_SECONDS))
    return {
        row.location: (row.id, row.weight, row.extra or {})
        for row in gateway.objects_recent(connector_id=connector.pk, recheck_seconds=seconds)
    }


def _recheck(connector: Connector, recent: dict, listed) -> int:
    """Flag the recently registered objects of `listed` that changed under their key; returns
    how many."""
    flagged = 0
    for location, _relative, obj in listed:
        if location not in recent:
            continue
        pk, weight, extra = recent[location]
        now = _extra(obj)
        etag_then = extra.get("etag", "")
        changed = (
            int(obj["Size"]) != weight
            or (now["etag"] and etag_then and now["etag"] != etag_then)
            or ("mtime_ns" in extra and now["mtime_ns"] != extra["mtime_ns"])
        )
        if not changed:
            continue
        change = {
            "etag": [etag_then, now["etag"]],
            "size": [weight, int(obj["Size"])],
            "last_modified": [extra.get("last_modified"), now["last_modified"]],
        }
        if gateway.object_flag_changed(
            asset_id=pk,
            size=int(obj["Size"]),
            etag=now["etag"],
            last_modified=now["last_modified"],
            mtime_ns=now["mtime_ns"],
            change=change,
            old_size=weight,
            old_etag=etag_then,
        ):
            flagged += 1
            log.warning(
                "connector %s: object %s changed after it was registered as asset %s "
                "(ETag %s -> %s, %s -> %s bytes); the jobs that committed it read it again "
                "(a restatement)",
                connector.name,
                location,
                pk,
                etag_then,
                now["etag"],
                weight,
                obj["Size"],
            )
    return flagged


def _as_listed(info: dict) -> dict:
    """An fsspec `info` entry in ListObjectsV2's shape."""
    from datetime import UTC, datetime

    modified = info.get("mtime") or info.get("LastModified") or info.get("created")
    if isinstance(modified, int | float):
        modified = datetime.fromtimestamp(modified, UTC)
    if not isinstance(modified, datetime):
        modified = datetime.fromtimestamp(0, UTC)
    if modified.tzinfo is None:
        modified = modified.replace(tzinfo=UTC)
    return {"Size": info.get("size") or 0, "ETag": info.get("ETag", ""), "LastModified": modified}


# ---- what the worker reads ---------------------------------------------------------------------


def read_spec(connector: Connector, batch: Batch) -> dict:
    """The batch's objects (in id order) and how to reach them; credentials only by name."""
    config = connector.config or {}
    rows = list(
        Asset.objects.filter(connector=connector, id__gte=batch.span.lower, id__lt=batch.span.upper)
        .order_by("id")
        .values_list("location", "weight", "extra")
    )
    locations = [location for location, _weight, _extra in rows]
    source = {
        "kind": "object_store",
        "objects": [
            {"location": location, "size": weight, "etag": (extra or {}).get("etag", "")}
            for location, weight, extra in rows
        ],
        "format": config.get("format") or _format_of(locations),
        "spark_native": bool(config.get("spark_native", False)),
    }
    for key in ("endpoint_url", "region", *CREDENTIAL_KEYS):
        if config.get(key):
            source[key] = config[key]
    return {"items": locations, "source": source}


def _format_of(locations: list[str]) -> str:
    for location in locations:
        lowered = location.lower()
        if lowered.endswith((".json", ".jsonl", ".ndjson")):
            return "json"
        if lowered.endswith(".csv"):
            return "csv"
    return "parquet"
