"""What an Iceberg table's snapshot expiry will take from a job, read from the table's metadata only.

A job reads snapshots; a snapshot the table no longer holds cannot be read incrementally (its
batch fails, docs/sources/iceberg.md). Snapshot expiry (Spark's `expire_snapshots`, pyiceberg's
`table.maintenance.expire_snapshots()`, a catalog's maintenance service) removes the snapshots
older than `history.expire.max-snapshot-age-ms` (default 5 days) but always keeps the newest
`history.expire.min-snapshots-to-keep` of the branch (default 1), and only when a run comes round.

The inputs, in bounded time per job:
- the table's properties (the two above) and its current branch of snapshots (positions: their
  order in the branch, times: their commit times);
- the expiry runs the metadata log shows: each previous metadata file (the last METADATA_READ
  of them, immutable, so each is read once per process) lists the snapshots the table held
  then; a snapshot that one file holds and the next does not was expired by a run at the next
  file's time. Two runs or more give the schedule (the median gap, the last run); without them
  expiry is assumed to run whenever a snapshot becomes eligible (the earliest loss), and the
  inputs say so. A run also bounds the age it used (older than the newest snapshot it expired,
  no older than the oldest unprotected one it kept): used when the table sets no age;
- against them the snapshot the job still needs (services/retention_forecast.py: its watermark,
  or an open backfill, restatement or retry below it) and its recent read rate in snapshots.
"""

import gzip
import json
import statistics
import threading
from array import array
from collections import OrderedDict

from inventory.models import Asset, Connector
from inventory.services import retention_model as model
from inventory.services.errors import InvalidInput
from inventory.sources.iceberg import snapshots as history
from inventory.sources.iceberg.config import open_table
from inventory.sources.iceberg.discovery import new_snapshots
from workers.spark.errors import ReadError
from workers.spark.iceberg_files import confined

MAX_AGE = "history.expire.max-snapshot-age-ms"
MIN_KEEP = "history.expire.min-snapshots-to-keep"
MAX_AGE_DEFAULT_MS = 5 * 86_400_000
MIN_KEEP_DEFAULT = 1
METADATA_READ = 100  # previous metadata files looked at for the expiry runs
RATE_WINDOW_SECONDS = 300.0  # the write rate is the last five minutes' (or the branch's age)
_CACHED_FILES = 1024  # metadata files remembered per process (16 bytes a snapshot each)

# metadata file -> (when it was written, its snapshots' ids, their commit times)
_held: "OrderedDict[str, tuple[float, array, array]]" = OrderedDict()
_held_lock = threading.Lock()


def expiry_settings(properties: dict) -> dict:
    """{"max_age_seconds", "keep", "age_set"} from the table's properties."""
    found = properties or {}

    def number(key: str, default: int) -> tuple[int, bool]:
        text = found.get(key)
        if text is None:
            return default, False
        try:
            value = int(str(text).strip())
        except ValueError:
            raise InvalidInput(
                "config.table", f"table property {key}={text!r} is not a number"
            ) from None
        if value < 0:
            raise InvalidInput("config.table", f"table property {key}={text!r} is negative")
        return value, True

    age_ms, age_set = number(MAX_AGE, MAX_AGE_DEFAULT_MS)
    keep, _ = number(MIN_KEEP, MIN_KEEP_DEFAULT)
    return {"max_age_seconds": age_ms / 1000, "keep": max(keep, 1), "age_set": age_set}


def _held_by(location: str, uri: str, *, name: str) -> tuple[float, array, array]:
    """(when the metadata file was written, the ids of the snapshots it holds, their commit
    times)."""
    with _held_lock:
        if uri in _held:
            _held.move_to_end(uri)
            return _held[uri]
    path = confined(location, uri, table=name, snapshot=None, what="metadata log")
    opener = gzip.open if path.endswith(".gz.metadata.json") else open
    with opener(path, "rt", encoding="utf-8") as text:
        found = json.load(text)
    snapshots = found.get("snapshots") or ()
    held = (
        found["last-updated-ms"] / 1000,
        array("q", (s["snapshot-id"] for s in snapshots)),
        array("d", (s["timestamp-ms"] / 1000 for s in snapshots)),
    )
    with _held_lock:
        _held[uri] = held
        while len(_held) > _CACHED_FILES:
            _held.popitem(last=False)
    return held


def expiry_runs(table, *, name: str, keep: int) -> list[dict]:
    """The expiry runs the metadata log shows, oldest first: {"at", "expired" (commit times of
    the snapshots it removed), "kept" (commit time of the oldest snapshot it kept that the keep
    rule did not protect, or None)}. A metadata file gone or unreadable is skipped over."""
    metadata = table.metadata
    location = metadata.location
    files = [entry.metadata_file for entry in metadata.metadata_log[-METADATA_READ:]]
    current = (
        metadata.last_updated_ms / 1000,
        array("q", (s.snapshot_id for s in metadata.snapshots)),
        array("d", (s.timestamp_ms / 1000 for s in metadata.snapshots)),
    )
    states = []
    for uri in files:
        try:
            states.append(_held_by(location, uri, name=name))
        except (ReadError, OSError, ValueError, KeyError, TypeError):
            # deleted after commit, outside the table (never read), or not a metadata file
            states.append(None)
    states.append(current)
    runs = []
    for before, after in zip(states, states[1:], strict=False):
        if before is None or after is None:
            continue
        still = set(after[1])
        expired = [t for sid, t in zip(before[1], before[2], strict=True) if sid not in still]
        if not expired:
            continue
        times = sorted(after[2])
        unprotected = times[: max(len(times) - keep, 0)]
        runs.append(
            {"at": after[0], "expired": expired, "kept": unprotected[0] if unprotected else None}
        )
    return runs


def expiry_schedule(runs: list[dict]) -> dict | None:
    """{"last_run", "every"} (seconds) from two runs or more, else None."""
    if len(runs) < 2:
        return None
    times = [run["at"] for run in runs[-8:]]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    every = statistics.median(gaps)
    return {"last_run": times[-1], "every": every} if every > 0 else None


def observed_age(run: dict) -> tuple[float | None, float]:
    """(at least, less than) the age a run expired snapshots at: it removed a snapshot committed
    at t (age < run - t) and kept an unprotected one committed at u (age >= run - u)."""
    below = run["at"] - max(run["expired"])
    at_least = None if run["kept"] is None else max(run["at"] - run["kept"], 0.0)
    return at_least, below


def _needed_index(connector: Connector, chain: list, needed_id: int) -> tuple[int, int | None]:
    """(position in `chain` of the snapshot the job needs, its id): the first registered at or
    after asset `needed_id`, else the first discovery registers next. Position -1 when the table
    no longer holds it."""
    extra = (
        Asset.objects.filter(connector=connector, id__gte=needed_id)
        .order_by("id")
        .values_list("extra", flat=True)
        .first()
    )
    if extra is None:
        index = new_snapshots(chain, connector.cursor or {})
        return index, chain[index].snapshot_id if index < len(chain) else None
    sid = extra["snapshot"]
    ids = [s.snapshot_id for s in chain]
    return (ids.index(sid) if sid in ids else -1), sid


def write_rate(times: list[float], now: float) -> float:
    """Snapshots a second over the last RATE_WINDOW_SECONDS, or since the oldest one held."""
    if len(times) < 2:
        return 0.0
    window = min(RATE_WINDOW_SECONDS, now - times[0])
    if window <= 0:
        return 0.0
    return sum(1 for t in times if t > now - window) / window


def probe(*, connector: Connector, needed_id: int, rates: dict, now: float) -> list:
    config = connector.config or {}
    name = config["table"]
    table = open_table(config)
    settings = expiry_settings(table.metadata.properties)
    keep = settings["keep"]
    try:
        chain = history.chain(table)
        runs = expiry_runs(table, name=name, keep=keep)
    except ReadError as exc:
        raise InvalidInput("config.table", str(exc)) from None
    times = [s.timestamp_ms / 1000 for s in chain]
    position, needed_snapshot = _needed_index(connector, chain, needed_id)
    read_rate = float(rates.get("items", 0.0))
    written = write_rate(times, now)
    age, age_from = settings["max_age_seconds"], "table property"
    age_seen = observed_age(runs[-1]) if runs else None
    if not settings["age_set"]:
        if age_seen is not None:
            low, high = age_seen
            age, age_from = (low if low is not None else high), "observed expiry"
        else:
            age_from = "default"
    schedule = expiry_schedule(runs)
    inputs = {
        "snapshots_held": len(chain),
        "needed_snapshot": needed_snapshot,
        "snapshots_ahead": max(len(chain) - position, 0) if position >= 0 else None,
        "read_per_second": round(read_rate, 4),
        "written_per_second": round(written, 4),
        "max_snapshot_age_seconds": round(age, 3),
        "max_snapshot_age_from": age_from,
        "min_snapshots_to_keep": keep,
        "expiry_runs_seen": len(runs),
    }
    if age_seen is not None:
        inputs["observed_age_seconds"] = [
            None if age_seen[0] is None else round(age_seen[0], 3),
            round(age_seen[1], 3),
        ]
    if schedule is None:
        inputs["expiry"] = (
            "fewer than two expiry runs in the metadata log: expiry is assumed to run as soon as "
            "a snapshot is eligible (the earliest loss)"
        )
    else:
        inputs["expiry_every_seconds"] = round(schedule["every"], 3)
        inputs["last_expiry"] = schedule["last_run"]
    return [
        (
            "snapshot expiry",
            model.Timeline(points=tuple(enumerate(times)), head=len(chain), now=now, rate=written),
            model.Retention(
                seconds=age,
                keep=keep,
                every=None if schedule is None else schedule["every"],
                last_run=None if schedule is None else schedule["last_run"],
            ),
            model.Reader(position, read_rate),
            0,
            inputs,
        )
    ]
