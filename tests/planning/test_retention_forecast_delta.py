"""The retention-breach forecast of a slow job on a Delta table vacuumed on a schedule.

A writer appends versions, a compaction takes their small files out of the table, and VACUUM
(deltalake's) runs every few seconds with the table's `deletedFileRetentionDuration`: once a
run comes after the compaction plus that retention, the files of the versions the slow job has
not read yet are deleted from disk and it can no longer read them. The forecast, made right after
the compaction from the table's log alone, is compared with the moment the first file the job
still needs is gone.
"""

import json
import os
import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from inventory.models import Asset
from inventory.services import discovery, lifecycle
from inventory.services.connectors import connector_create
from inventory.services.retention_forecast import retention_forecast_refresh
from tests.support.factories import make_job
from tests.support.worker_fixtures import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

VACUUM_EVERY = 3.0
RETENTION = 5  # seconds, the table's deletedFileRetentionDuration
WRITE_EVERY = 0.25


class Writer(threading.Thread):
    """Appends a version every WRITE_EVERY seconds."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()

    def run(self):
        n = 0
        while not self.stop.wait(WRITE_EVERY):
            n += 1
            write_deltalake(self.path, pa.table({"n": [n]}), mode="append")


class Maintenance(threading.Thread):
    """The table's scheduled maintenance: VACUUM, then a compaction, every VACUUM_EVERY s."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(VACUUM_EVERY):
            table = DeltaTable(self.path)
            table.vacuum(dry_run=False)
            table.optimize.compact()


def _log(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as lines:
        return [json.loads(line) for line in lines]


def _last_compaction(path: str) -> tuple[int, list[str]]:
    """The last OPTIMIZE's version and the files it removed."""
    for entry in DeltaTable(path).history(limit=50):
        if entry["operation"] == "OPTIMIZE":
            actions = _log(path, entry["version"])
            return entry["version"], [a["remove"]["path"] for a in actions if "remove" in a]
    return -1, []


def _added_by(path: str, files: list[str], below: int) -> dict[str, int]:
    wanted, found = set(files), {}
    for version in range(below - 1, -1, -1):
        for action in _log(path, version):
            if "add" in action and action["add"]["path"] in wanted:
                found[action["add"]["path"]] = version
        if len(found) == len(wanted):
            break
    return found


def _next_compaction(path: str, seen: int) -> dict[str, int] | None:
    """The files a compaction newer than `seen` took out, by the version that added each, once
    one took out those of three or more versions (a loaded machine can make a compaction that
    took out one or two, or whose files were all added by an earlier compaction)."""
    compacted, removed = _last_compaction(path)
    if compacted <= seen or not removed:
        return None
    versions = _added_by(path, removed, compacted)
    if not versions or max(versions.values()) - min(versions.values()) < 2:
        return None
    return versions


def test_the_forecast_matches_when_a_scheduled_vacuum_deletes_what_a_slow_job_needs(tmp_path):
    path = str(tmp_path / "events")
    write_deltalake(
        path,
        pa.table({"n": [0]}),
        configuration={"delta.deletedFileRetentionDuration": f"interval {RETENTION} seconds"},
    )
    connector = connector_create(name="vacuumed", kind="delta", config={"path": path})
    threads = [Writer(path), Maintenance(path)]
    for thread in threads:
        thread.start()
    try:
        # the log shows a schedule once two runs deleted something
        wait_until(
            lambda: sum(
                1
                for entry in DeltaTable(path).history(limit=200)
                if entry["operation"] == "VACUUM START"
            )
            >= 2,
            timeout=60,
            message="two VACUUM runs in the log",
        )
        seen, _ = _last_compaction(path)
        versions = wait_until(
            lambda: _next_compaction(path, seen),
            timeout=60,
            message="a compaction that took out the files of three or more versions",
        )
        first, last = min(versions.values()), max(versions.values())
        while discovery.discover(connector):
            pass
        start = Asset.objects.get(connector=connector, extra__version=first)
        # the job starts at the oldest version the compaction just took out, and reads slowly
        job = make_job(
            connector=connector,
            name="slow-delta",
            batch_weight=10**9,
            max_items=1,
            start_position=start.pk,
        )
        started = time.time()
        forecast = retention_forecast_refresh(job=job)
        assert forecast.verdict == "at_risk", forecast.inputs
        predicted = forecast.margin_seconds
        vacuum = next(s for s in forecast.inputs["streams"] if s["name"] == "vacuum")
        assert vacuum["vacuum_retention_seconds"] == RETENTION
        assert vacuum["vacuum_every_seconds"] == pytest.approx(VACUUM_EVERY, rel=0.2)

        needed = [os.path.join(path, name) for name in versions]
        lost_at, next_read = None, started + 1
        while lost_at is None and time.time() < started + 3 * predicted + 10:
            if not all(os.path.exists(name) for name in needed):
                lost_at = time.time()
                break
            if time.time() >= next_read:  # one version a second: far slower than the writes
                batch = lifecycle.batch_acquire(job=job, worker="slow-reader")
                if batch is not None:
                    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
                next_read += 1
            time.sleep(0.05)
    finally:
        for thread in threads:
            thread.stop.set()
        for thread in threads:
            thread.join(30)
    assert lost_at is not None, "the vacuum never reached what the job needs"
    assert last - first >= 2  # the job could not have read past them at one version a second
    actual = lost_at - started
    assert predicted == pytest.approx(actual, rel=0.2), (predicted, actual, forecast.inputs)
