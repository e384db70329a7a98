"""The retention-breach forecast of a slow job on an Iceberg table whose snapshots are expired on a
schedule (pyiceberg's SQL catalog on a SQLite file, as tests/sources/test_iceberg.py writes them).

pyiceberg 0.12 expires the snapshots it is given (`table.maintenance.expire_snapshots()`); it
does not read the table's expiry properties itself, so the scheduled maintenance here does what
Spark's `expire_snapshots` does with them: every EXPIRE_EVERY seconds it removes the snapshots of
the branch older than `history.expire.max-snapshot-age-ms`, keeping the newest
`history.expire.min-snapshots-to-keep`. A writer commits a snapshot every WRITE_EVERY seconds and
the job reads one a second. The forecast, made from the table's metadata and the job's commits
alone, is compared with the moment the snapshot the job needs next is no longer in the table.
"""

import threading
import time
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from inventory.models import Asset
from inventory.services import discovery, lifecycle
from inventory.services.connectors import connector_create
from inventory.services.retention_forecast import needed_item, retention_forecast_refresh
from inventory.sources.iceberg import retention as iceberg_retention
from tests.support.factories import make_job
from tests.support.worker_fixtures import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MAX_AGE_MS = 24_000
KEEP = 5
EXPIRE_EVERY = 1.5
WRITE_EVERY = 0.5
READ_EVERY = 2.0  # the job reads a snapshot every 2 s: a quarter of the writes
WARM_UP_READS = 6  # reads before the forecast, so that the job's rate is known


def _catalog(root) -> SqlCatalog:
    return SqlCatalog("tidemark", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")


def _rows(n: int) -> pa.Table:
    return pa.table({"n": pa.array([n], pa.int64())})


def _lake(root, properties: dict):
    root.mkdir(parents=True, exist_ok=True)
    catalog = _catalog(root)
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=_rows(0).schema, properties=properties)
    return {"catalog_uri": f"sqlite:///{root}/catalog.db", "table": "ns.t"}


def _retrying(step, stop: threading.Event | None = None):
    """Run `step` until it commits: another thread's commit in between is a conflict to retry."""
    while stop is None or not stop.is_set():
        try:
            return step()
        except Exception as exc:  # CommitFailedException, or SQLite busy under load
            if "commit" not in type(exc).__name__.lower() and "locked" not in str(exc):
                raise
            time.sleep(0.02)
    return None


def expire(table) -> list[int]:
    """One maintenance run by the table's own settings: the branch's snapshots older than the
    max age, but never the newest KEEP. Returns the ids it expired."""
    table.refresh()
    properties = table.metadata.properties
    max_age = int(properties["history.expire.max-snapshot-age-ms"])
    keep = int(properties["history.expire.min-snapshots-to-keep"])
    cutoff = datetime.now(UTC).timestamp() * 1000 - max_age
    branch = _branch(table)
    ids = [s.snapshot_id for s in branch[: max(len(branch) - keep, 0)] if s.timestamp_ms < cutoff]
    if ids:
        table.maintenance.expire_snapshots().by_ids(ids).commit()
    return ids


def _branch(table) -> list:
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    found, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        found.append(snapshot)
        snapshot = by_id.get(snapshot.parent_snapshot_id)
    return found[::-1]


class Writer(threading.Thread):
    def __init__(self, root):
        super().__init__(daemon=True)
        self.table = _catalog(root).load_table("ns.t")
        self.stop = threading.Event()
        self.failed: BaseException | None = None

    def run(self):
        n, start = 0, time.time()
        try:  # on a schedule: a slow commit does not slow the ones after it
            while not self.stop.wait(max(start + (n + 1) * WRITE_EVERY - time.time(), 0)):
                n += 1

                def append(n=n):
                    self.table.refresh()
                    self.table.append(_rows(n))

                _retrying(append, self.stop)
        except BaseException as exc:  # reported by the test
            self.failed = exc


class Expiry(threading.Thread):
    """The table's scheduled maintenance; `runs` the times of the runs that expired something."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.table = _catalog(root).load_table("ns.t")
        self.stop = threading.Event()
        self.runs: list[float] = []
        self.failed: BaseException | None = None

    def run(self):
        n, start = 0, time.time()
        try:
            while not self.stop.wait(max(start + (n + 1) * EXPIRE_EVERY - time.time(), 0)):
                n += 1
                if _retrying(lambda: expire(self.table), self.stop):
                    self.runs.append(time.time())
        except BaseException as exc:
            self.failed = exc


def _held(table) -> set[int]:
    table.refresh()
    return {s.snapshot_id for s in table.metadata.snapshots}


def _needed_snapshot(job) -> int | None:
    extra = (
        Asset.objects.filter(connector=job.connector, id__gte=needed_item(job=job))
        .order_by("id")
        .values_list("extra", flat=True)
        .first()
    )
    return None if extra is None else extra["snapshot"]


def _read_one(job) -> None:
    discovery.discover(job.connector)
    batch = lifecycle.batch_acquire(job=job, worker="slow-reader")
    if batch is not None:
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)


def test_the_forecast_matches_when_scheduled_snapshot_expiry_overtakes_a_slow_job(tmp_path):
    root = tmp_path / "lake"
    config = _lake(
        root,
        {
            "history.expire.max-snapshot-age-ms": str(MAX_AGE_MS),
            "history.expire.min-snapshots-to-keep": str(KEEP),
        },
    )
    connector = connector_create(name="expiring", kind="iceberg", config=config)
    threads = [Writer(root), Expiry(root)]
    for thread in threads:
        thread.start()
    try:
        # the metadata log shows a schedule once runs have expired something
        wait_until(lambda: len(threads[1].runs) >= 3, timeout=120, message="three expiry runs")
        discovery.discover(connector)
        # the job starts at the newest snapshot: everything it reads until the forecast loss is
        # written by then, at a quarter of the writes
        latest = Asset.objects.filter(connector=connector).order_by("id").last()
        job = make_job(
            connector=connector,
            name="slow-iceberg",
            batch_weight=10**12,
            max_items=1,
            start_position=latest.pk,
        )
        next_read = time.time()
        for _ in range(WARM_UP_READS):
            time.sleep(max(next_read - time.time(), 0))
            _read_one(job)
            next_read += READ_EVERY
        # looked at halfway to the next read: the job's reads are steps, the model's a slope
        time.sleep(max(next_read - READ_EVERY / 2 - time.time(), 0))
        started = time.time()
        forecast = retention_forecast_refresh(job=job)
        assert forecast.verdict == "at_risk", (forecast.message, forecast.inputs, forecast.error)
        predicted = forecast.margin_seconds
        [stream] = forecast.inputs["streams"]
        assert stream["max_snapshot_age_seconds"] == MAX_AGE_MS / 1000
        assert stream["max_snapshot_age_from"] == "table property"
        assert stream["min_snapshots_to_keep"] == KEEP
        # the schedule is read from the metadata log; the test's own clock of the runs agrees
        gaps = [b - a for a, b in zip(threads[1].runs, threads[1].runs[1:], strict=False)]
        assert stream["expiry_every_seconds"] == pytest.approx(sorted(gaps)[len(gaps) // 2], 0.25)
        # the runs expired at the property's age (a run's metadata is written a moment after
        # its cutoff was taken, so the lower bound may exceed it by that moment)
        low, below = stream["observed_age_seconds"]
        assert low - 2.0 <= MAX_AGE_MS / 1000 < below
        # measured, not assumed: a busy machine writes and reads slower than asked
        assert 0 < stream["read_per_second"] < stream["written_per_second"]

        lost_at, table = None, _catalog(root).load_table("ns.t")
        deadline = started + 3 * predicted + 30
        while time.time() < deadline:
            needed = _needed_snapshot(job)
            if needed is not None and needed not in _held(table):
                lost_at = time.time()
                break
            if time.time() >= next_read:
                _read_one(job)
                next_read += READ_EVERY
            time.sleep(0.1)
    finally:
        for thread in threads:
            thread.stop.set()
        for thread in threads:
            thread.join(30)
    for thread in threads:
        assert thread.failed is None, thread.failed
    assert lost_at is not None, "the expiry never reached what the job needs"
    actual = lost_at - started
    assert predicted == pytest.approx(actual, rel=0.2), (predicted, actual, forecast.inputs)
    # and the forecast says so once it has happened
    assert retention_forecast_refresh(job=job).verdict == "lost"


def _not_now(forecast) -> bool:
    """No loss now: none forecast, or one only after more snapshots are written."""
    if forecast.verdict == "no_loss":
        return True
    return forecast.verdict == "at_risk" and forecast.margin_seconds > 0


def test_the_newest_snapshots_kept_by_the_table_are_never_forecast_lost(tmp_path):
    """No expiry run yet: a job further behind than `min-snapshots-to-keep` on snapshots older
    than the max age loses its snapshot at the next run (now, as the schedule is unknown); a job
    inside the kept ones loses nothing until another snapshot is written; one run of the table's
    maintenance then agrees with both, and the first job's snapshot gone is `lost`."""
    root = tmp_path / "lake"
    config = _lake(
        root,
        {"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "3"},
    )
    table = _catalog(root).load_table("ns.t")
    for n in range(6):
        table.append(_rows(n))
    time.sleep(0.05)  # every snapshot is older than the max age
    connector = connector_create(name="kept", kind="iceberg", config=config)
    assert discovery.discover(connector) == 6
    assets = list(Asset.objects.filter(connector=connector).order_by("id"))
    behind = make_job(connector=connector, name="behind", start_position=assets[2].pk)
    within = make_job(connector=connector, name="within", start_position=assets[3].pk)

    forecast = retention_forecast_refresh(job=behind)
    assert (forecast.verdict, forecast.margin_seconds) == ("at_risk", 0.0), forecast.inputs
    [stream] = forecast.inputs["streams"]
    assert stream["needed_snapshot"] == assets[2].extra["snapshot"]
    assert stream["min_snapshots_to_keep"] == 3 and stream["expiry_runs_seen"] == 0
    assert "expiry is assumed to run as soon as" in stream["expiry"]
    kept = retention_forecast_refresh(job=within)
    assert _not_now(kept), (kept.verdict, kept.margin_seconds, kept.inputs)

    expired = expire(table)
    assert set(expired) == {a.extra["snapshot"] for a in assets[:3]}
    assert _held(table) == {a.extra["snapshot"] for a in assets[3:]}
    assert retention_forecast_refresh(job=behind).verdict == "lost"
    after = retention_forecast_refresh(job=within)
    assert _not_now(after), (after.verdict, after.margin_seconds, after.inputs)
    runs = iceberg_retention.expiry_runs(table, name="ns.t", keep=3)
    assert len(runs) == 1 and len(runs[0]["expired"]) == 3 and runs[0]["kept"] is None
