"""What a Delta table's retention will take from a job, read from the table's log only.

Two rules delete what a job reading versions still needs:
- VACUUM deletes the files a compaction (a `remove` without `dataChange`) took out of the table
  once the removal is older than the vacuum's retention (`deletedFileRetentionDuration`, or what
  the run was given): the version that added them can then no longer be read. Its runs' times
  and retention come from the log's VACUUM START commits, their schedule from the gaps between
  the last runs (two runs at least; without them vacuum is not forecast, and the inputs say so).
- The log's own cleanup deletes versions older than `logRetentionDuration` (default 30 days).
A version's files that a data change removed are not read (the rows are restated), so only
compactions count. The log of the versions the job still needs is read, at most
VERSIONS_READ of them (bounded time per job).
"""

import re
import statistics

from inventory.models import Asset, Connector
from inventory.services import retention_model as model
from inventory.services.errors import InvalidInput
from inventory.sources.delta import _table, commit_actions

VERSIONS_READ = 500
HISTORY_READ = 1000
LOG_RETENTION_DEFAULT = 30 * 86_400
DELETED_FILE_RETENTION_DEFAULT = 7 * 86_400
_UNITS = {
    "millisecond": 0.001,
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86_400,
    "week": 7 * 86_400,
}
_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+)\s+([a-z]+?)s?\s*$", re.IGNORECASE)


def interval_seconds(text: str | None, default: float, *, field: str) -> float:
    """A Delta table property such as "interval 7 days" in seconds."""
    if text is None:
        return default
    found = _INTERVAL.match(text)
    if not found or found.group(2).lower() not in _UNITS:
        raise InvalidInput(field, f"cannot read the interval {text!r}")
    return int(found.group(1)) * _UNITS[found.group(2).lower()]


def vacuum_schedule(history: list[dict], default_retention: float) -> dict | None:
    """{"last_run", "every", "retention"} from the log's VACUUM START commits (seconds), or None
    with fewer than two runs."""
    runs = sorted(
        (entry for entry in history if entry.get("operation") == "VACUUM START"),
        key=lambda entry: entry["timestamp"],
    )
    if len(runs) < 2:
        return None
    times = [entry["timestamp"] / 1000 for entry in runs[-6:]]
    parameters = runs[-1].get("operationParameters") or {}
    given = parameters.get("specifiedRetentionMillis")
    if given in (None, "", "null"):
        given = parameters.get("defaultRetentionMillis")
    retention = float(given) / 1000 if given not in (None, "", "null") else default_retention
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    return {"last_run": times[-1], "every": statistics.median(gaps), "retention": retention}


def removal_times(path: str, first: int, latest: int, commit_time: dict) -> dict[int, float]:
    """{version: when a compaction first removed a file it added}, for versions first..latest."""
    added_by: dict[str, int] = {}
    removed: dict[int, float] = {}
    for version in range(first, latest + 1):
        actions = commit_actions(path, version)
        for action in actions:
            add = action.get("add")
            if add:
                added_by[add["path"]] = version
            remove = action.get("remove")
            if remove and not remove.get("dataChange", True) and remove["path"] in added_by:
                owner = added_by[remove["path"]]
                removed.setdefault(owner, commit_time[version])
    return removed


def _needed_version(connector: Connector, needed_id: int) -> int | None:
    extra = (
        Asset.objects.filter(connector=connector, id__gte=needed_id)
        .order_by("id")
        .values_list("extra", flat=True)
        .first()
    )
    return None if extra is None else int(extra["version"])


def probe(*, connector: Connector, needed_id: int, rates: dict, now: float) -> list:
    config = connector.config or {}
    path = config["path"]
    table = _table(path)
    latest = table.version()
    properties = table.metadata().configuration or {}
    log_retention = interval_seconds(
        properties.get("delta.logRetentionDuration"),
        LOG_RETENTION_DEFAULT,
        field="config.path",
    )
    file_retention = interval_seconds(
        properties.get("delta.deletedFileRetentionDuration"),
        DELETED_FILE_RETENTION_DEFAULT,
        field="config.path",
    )
    history = table.history(limit=HISTORY_READ)
    commit_time = {entry["version"]: entry["timestamp"] / 1000 for entry in history}
    oldest = min(commit_time)
    needed = _needed_version(connector, needed_id)
    if needed is None:
        needed = latest + 1  # nothing registered left to read: it needs only what comes next
    read_rate = float(rates.get("items", 0.0))
    recent = [t for t in commit_time.values() if t >= now - 300]
    write_rate = len(recent) / 300
    inputs = {
        "latest_version": latest,
        "oldest_version_in_log": oldest,
        "needed_version": needed,
        "read_per_second": round(read_rate, 4),
        "written_per_second": round(write_rate, 4),
        "log_retention_seconds": log_retention,
    }
    reader = model.Reader(needed, read_rate)
    versions = sorted(commit_time)
    streams = [
        (
            "log retention",
            model.Timeline(
                points=tuple((v, commit_time[v]) for v in versions),
                head=latest + 1,
                now=now,
                rate=write_rate,
            ),
            model.Retention(seconds=log_retention),
            reader,
            oldest,
            inputs,
        )
    ]
    schedule = vacuum_schedule(history, file_retention)
    if schedule is None:
        inputs["vacuum"] = "fewer than two VACUUM runs in the log: vacuum is not forecast"
        return streams
    last = min(latest, needed + VERSIONS_READ - 1)
    removed = removal_times(path, max(needed, oldest), last, commit_time) if needed <= last else {}
    # a loss is any version still to read being deleted: the earliest removal at or after each
    suffix, points = float("inf"), []
    for version in range(last, needed - 1, -1):
        suffix = min(suffix, removed.get(version, float("inf")))
        if suffix != float("inf"):
            points.append((version, suffix))
    points.reverse()
    head = points[-1][0] + 1 if points else needed
    streams.append(
        (
            "vacuum",
            model.Timeline(points=tuple(points), head=head, now=now, rate=0.0),
            model.Retention(
                seconds=schedule["retention"],
                every=schedule["every"],
                last_run=schedule["last_run"],
            ),
            reader,
            None,
            {
                **inputs,
                "vacuum_every_seconds": round(schedule["every"], 1),
                "vacuum_retention_seconds": schedule["retention"],
                "last_vacuum": schedule["last_run"],
                "compacted_versions_ahead": len(removed),
            },
        )
    )
    return streams
