"""Asset registration: directory scanning, bad input, and ids in visibility order (invariant 5).

The visibility test runs real concurrent writers and a reader in separate processes. The same
harness is run once against an insert path written here without the connector lock, to prove the
detector does see the anomaly that the lock prevents.
"""

import multiprocessing
import os
import random
import shutil
import tempfile
import time
import traceback
from pathlib import Path

import pytest
from django.db import connection, connections, transaction

from inventory.models import Asset, ConnectorKind
from inventory.services.assets import assets_register
from inventory.services.errors import InvalidInput
from inventory.sources.files import directory_discover, scan_directory
from tests.support.factories import ConnectorFactory
from tests.support.unprivileged import refusal_seen_unprivileged

# ---- scanning and registration -----------------------------------------------------------------


def _write(path, size, mtime):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, ns=(mtime, mtime))


def test_scan_finds_data_files_oldest_first_with_their_size(tmp_path):
    _write(tmp_path / "b.json", 20, 2_000_000_000)
    _write(tmp_path / "nested" / "a.parquet", 10, 1_000_000_000)
    _write(tmp_path / "c.csv", 30, 3_000_000_000)
    _write(tmp_path / "notes.txt", 5, 500)
    _write(tmp_path / ".hidden.parquet", 5, 500)
    _write(tmp_path / "_SUCCESS.json", 5, 500)

    found = scan_directory(path=str(tmp_path))
    assert [(Path(loc).name, size) for loc, size, _ in found] == [
        ("a.parquet", 10),
        ("b.json", 20),
        ("c.csv", 30),
    ]
    assert found[0][2] == {"mtime_ns": 1_000_000_000}
    only_csv = scan_directory(path=str(tmp_path), patterns=["*.csv"])
    assert [Path(loc).name for loc, _, _ in only_csv] == ["c.csv"]


@pytest.mark.django_db
def test_discovery_registers_new_files_only_with_their_size_as_weight(tmp_path):
    _write(tmp_path / "one.parquet", 100, 1_000_000_000)
    _write(tmp_path / "two.parquet", 200, 2_000_000_000)
    connector = ConnectorFactory(config={"path": str(tmp_path)})

    assert directory_discover(connector=connector) == 2
    assert directory_discover(connector=connector) == 0
    _write(tmp_path / "three.parquet", 300, 3_000_000_000)
    assert directory_discover(connector=connector) == 1

    assets = list(Asset.objects.filter(connector=connector).order_by("id"))
    assert [(os.path.basename(a.location), a.weight) for a in assets] == [
        ("one.parquet", 100),
        ("two.parquet", 200),
        ("three.parquet", 300),
    ]


@pytest.mark.django_db
def test_registering_a_known_location_again_leaves_it_alone():
    connector = ConnectorFactory()
    assert assets_register(connector=connector, items=[("/d/a", 1, {}), ("/d/b", 2, {})]) == 2
    assert assets_register(connector=connector, items=[("/d/b", 99, {}), ("/d/c", 3, {})]) == 1
    weights = dict(Asset.objects.filter(connector=connector).values_list("location", "weight"))
    assert weights == {"/d/a": 1, "/d/b": 2, "/d/c": 3}


@pytest.mark.django_db
def test_a_missing_directory_is_a_clear_error_and_registers_nothing(tmp_path):
    connector = ConnectorFactory(config={"path": str(tmp_path / "nope")})
    with pytest.raises(InvalidInput) as refused:
        directory_discover(connector=connector)
    assert refused.value.field == "config.path"
    assert "does not exist" in refused.value.message
    assert not Asset.objects.filter(connector=connector).exists()


@pytest.mark.django_db
def test_a_file_given_as_the_directory_is_a_clear_error(tmp_path):
    _write(tmp_path / "data.parquet", 10, 1_000_000_000)
    connector = ConnectorFactory(config={"path": str(tmp_path / "data.parquet")})
    with pytest.raises(InvalidInput) as refused:
        directory_discover(connector=connector)
    assert refused.value.field == "config.path"
    assert "not a directory" in refused.value.message
    assert not Asset.objects.filter(connector=connector).exists()


@pytest.mark.django_db
def test_discovery_on_a_connector_that_is_not_files_is_refused():
    connector = ConnectorFactory(kind=ConnectorKind.TABLE)
    with pytest.raises(InvalidInput) as refused:
        directory_discover(connector=connector)
    assert refused.value.field == "kind"


def test_an_unreadable_directory_is_a_clear_error(settings):
    # under /tmp itself: pytest's tmp_path lies below a root-only directory
    holder = Path(tempfile.mkdtemp(prefix="tidemark-unreadable-"))
    settings.TIDEMARK_ALLOWED_ROOTS = [*settings.TIDEMARK_ALLOWED_ROOTS, str(holder)]
    unreadable = holder / "locked"
    _write(unreadable / "a.parquet", 10, 1_000_000_000)
    os.chmod(holder, 0o755)
    os.chmod(unreadable, 0o000)
    try:
        outcome = refusal_seen_unprivileged(lambda path: scan_directory(path=path), str(unreadable))
    finally:
        os.chmod(unreadable, 0o755)
        shutil.rmtree(holder)
    assert outcome[0] == "config.path"
    assert "not readable" in outcome[1]


@pytest.mark.django_db
@pytest.mark.parametrize("weight", [-1, 1.5, "10", True])
def test_a_bad_weight_is_refused_and_nothing_of_the_call_is_written(weight):
    connector = ConnectorFactory()
    items = [("/d/good", 5, {}), ("/d/bad", weight, {})]
    with pytest.raises(InvalidInput) as refused:
        assets_register(connector=connector, items=items)
    assert refused.value.field == "weight"
    assert "/d/bad" in refused.value.message
    assert not Asset.objects.filter(connector=connector).exists()


# ---- invariant 5: visible order = id order -----------------------------------------------------

WRITERS = 3
TRANSACTIONS_PER_WRITER = 60


def _register_locked(connector_id, locations):
    """The service path: ids are handed out under the connector's row lock."""
    from inventory.models import Connector

    assets_register(connector=Connector(pk=connector_id), items=[(loc, 1, {}) for loc in locations])


def _register_unlocked(connector_id, locations):
    """A plain sequence insert with no lock: what invariant 5 warns against."""
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO inventory_asset (connector_id, location, weight, extra, discovered_at) "
            "VALUES (%s, %s, 1, '{}', now())",
            [(connector_id, loc) for loc in locations],
        )


REGISTER_PATHS = {"locked": _register_locked, "unlocked": _register_unlocked}


def _writer(path_name, connector_id, writer, seed):
    rng = random.Random(seed)
    register = REGISTER_PATHS[path_name]
    for n in range(TRANSACTIONS_PER_WRITER):
        with transaction.atomic():
            register(connector_id, [f"/w{writer}/{n}-{k}" for k in range(2)])
            # a discovery transaction does not commit the instant its ids are taken
            time.sleep(rng.uniform(0, 0.004))


def _reader(connector_id, expected, anomalies):
    """Poll like a consumer resuming after the largest id it has seen; count rows that appear
    later with an id at or below it (each poll is one statement, so one snapshot)."""
    seen_max, seen_count, late = 0, 0, []
    deadline = time.monotonic() + 60
    while seen_count < expected and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FILTER (WHERE id <= %s), count(*), coalesce(max(id), 0) "
                "FROM inventory_asset WHERE connector_id = %s",
                [seen_max, connector_id],
            )
            at_or_below, total, newest = cursor.fetchone()
        if at_or_below > seen_count:
            late.append((seen_max, at_or_below - seen_count))
        seen_max, seen_count = newest, total
    anomalies.put((seen_count, late))


def _child(target, args, errors):
    try:
        target(*args)
    except BaseException:
        errors.put(traceback.format_exc())
        raise
    finally:
        connections.close_all()


def _race(path_name):
    """Run the writers and the reader at once; return (rows the reader saw, late appearances)."""
    connector = ConnectorFactory()
    expected = WRITERS * TRANSACTIONS_PER_WRITER * 2
    connections.close_all()  # every child opens its own connection
    context = multiprocessing.get_context("fork")
    errors, anomalies = context.Queue(), context.Queue()
    processes = [
        context.Process(target=_child, args=(_reader, (connector.pk, expected, anomalies), errors))
    ] + [
        context.Process(target=_child, args=(_writer, (path_name, connector.pk, n, n), errors))
        for n in range(WRITERS)
    ]
    for process in processes:
        process.start()
    seen, late = anomalies.get(timeout=90)
    for process in processes:
        process.join(30)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, "\n".join(failures)
    assert Asset.objects.filter(connector=connector).count() == expected
    return seen, expected, late


@pytest.mark.django_db(transaction=True)
def test_concurrent_registrations_become_visible_in_id_order():
    seen, expected, late = _race("locked")
    assert seen == expected
    assert late == []


@pytest.mark.django_db(transaction=True)
def test_the_detector_sees_late_smaller_ids_when_inserts_are_not_serialized():
    # Without the connector lock a transaction can take id N, another take N+1 and commit
    # first; a reader that saw N+1 then misses N forever. This proves the check above can fail.
    seen, expected, late = _race("unlocked")
    assert seen == expected
    assert late, "interleaved unlocked inserts should have produced a late smaller id"
