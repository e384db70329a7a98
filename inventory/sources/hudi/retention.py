"""What a Hudi table's cleaner will take from a job: `hoodie.cleaner.commits.retained` commits are
kept, older file slices are cleaned when the next commit runs the cleaner, so an instant the job
still needs is lost once that many newer commits exist. Read from the timeline only."""

import os

from inventory.models import Asset, Connector
from inventory.services import retention_model as model
from inventory.sources.hudi import _table, completed_instants

CLEANER_DEFAULT = 10  # Hudi's default hoodie.cleaner.commits.retained


def commits_retained(path: str) -> int:
    try:
        with open(os.path.join(path, ".hoodie", "hoodie.properties"), encoding="utf-8") as lines:
            for line in lines:
                key, sep, value = line.strip().partition("=")
                if sep and key == "hoodie.cleaner.commits.retained" and value.isdigit():
                    return int(value)
    except OSError:
        pass
    return CLEANER_DEFAULT


def _instant_seconds(stamp: str) -> float:
    from datetime import UTC, datetime

    digits = stamp[:17].ljust(17, "0")
    moment = datetime.strptime(digits[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    return moment.timestamp() + int(digits[14:17]) / 1000


def probe(*, connector: Connector, needed_id: int, rates: dict, now: float) -> list:
    path = (connector.config or {})["path"]
    instants = [instant.timestamp for instant in completed_instants(_table(path))]
    if not instants:
        return []
    retained = commits_retained(path)
    extra = (
        Asset.objects.filter(connector=connector, id__gte=needed_id)
        .order_by("id")
        .values_list("extra", flat=True)
        .first()
    )
    index = {stamp: number for number, stamp in enumerate(instants)}
    needed = index.get(str((extra or {}).get("instant")), len(instants))
    times = [_instant_seconds(stamp) for stamp in instants]
    recent = [t for t in times if t >= now - 3600]
    write_rate = len(recent) / 3600
    read_rate = float(rates.get("items", 0.0))
    return [
        (
            "cleaner",
            model.Timeline(
                points=tuple(enumerate(times)), head=len(instants), now=now, rate=write_rate
            ),
            model.Retention(positions=retained),
            model.Reader(needed, read_rate),
            None,
            {
                "cleaner_commits_retained": retained,
                "completed_instants": len(instants),
                "needed_instant": instants[needed] if needed < len(instants) else None,
                "commits_per_second": round(write_rate, 5),
            },
        )
    ]
