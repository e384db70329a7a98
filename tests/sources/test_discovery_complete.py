"""Discovery registers a file only once it is complete, and never reads a changed file twice
silently: stable size and modification time across two looks, a settle time, or a marker file."""

import logging
import os
import threading
import time

import pytest

from inventory.models import Asset
from inventory.services.connectors import connector_create
from inventory.services.errors import InvalidInput
from inventory.sources.files import directory_discover

pytestmark = pytest.mark.django_db


def _connector(tmp_path, **config):
    folder = tmp_path / "landing"
    folder.mkdir(exist_ok=True)
    return connector_create(
        name=f"landing-{len(config)}", kind="files", config={"path": str(folder), **config}
    ), folder


def _age(path, seconds):
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_file_still_being_written_is_not_registered_until_it_is_complete(tmp_path):
    connector, folder = _connector(tmp_path)
    growing = folder / "growing.csv"
    growing.write_text("id,value\n")
    stop = threading.Event()

    def write():
        n = 0
        while not stop.is_set():
            with growing.open("a") as fh:
                fh.write(f"{n},{n * n}\n")
            n += 1
            time.sleep(0.02)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.1)
        assert directory_discover(connector=connector) == 0  # changed between the two looks
    finally:
        stop.set()
        writer.join()
    assert not Asset.objects.filter(connector=connector).exists()

    assert directory_discover(connector=connector) == 1  # now stable
    asset = Asset.objects.get(connector=connector)
    assert asset.weight == growing.stat().st_size  # the final size, not a partial one


def test_with_a_settle_time_and_no_probe_only_files_untouched_that_long_are_registered(tmp_path):
    connector, folder = _connector(tmp_path, settle_seconds=60, stable_probe_seconds=0)
    young, old = folder / "young.parquet", folder / "old.parquet"
    young.write_bytes(b"x" * 4)
    old.write_bytes(b"y" * 9)
    _age(old, 120)
    assert directory_discover(connector=connector) == 1
    assert [a.location for a in Asset.objects.filter(connector=connector)] == [str(old)]
    _age(young, 61)
    assert directory_discover(connector=connector) == 1


def test_with_a_marker_suffix_a_file_counts_once_its_marker_exists(tmp_path):
    connector, folder = _connector(tmp_path, marker_suffix=".done", patterns=["*"])
    data = folder / "part-1.json"
    data.write_text("{}")
    assert directory_discover(connector=connector) == 0
    (folder / "part-1.json.done").write_text("")
    assert directory_discover(connector=connector) == 1
    assert [a.location for a in Asset.objects.filter(connector=connector)] == [str(data)]


def test_a_file_changed_after_registration_is_flagged_and_logged_not_read_again(tmp_path, caplog):
    connector, folder = _connector(tmp_path)
    data = folder / "orders.csv"
    data.write_text("id\n1\n")
    _age(data, 60)
    assert directory_discover(connector=connector) == 1
    data.write_text("id\n1\n2\n3\n")
    _age(data, 30)
    with caplog.at_level(logging.WARNING, logger="inventory.sources.files"):
        assert directory_discover(connector=connector) == 0
    asset = Asset.objects.get(connector=connector)
    assert asset.extra["changed_after_registration"]["size"] == data.stat().st_size
    assert "changed after it was registered" in caplog.text and str(data) in caplog.text
    assert Asset.objects.filter(connector=connector).count() == 1


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"settle_seconds": -1}, "config.settle_seconds"),
        ({"settle_seconds": "5"}, "config.settle_seconds"),
        ({"stable_probe_seconds": 3600}, "config.stable_probe_seconds"),
        ({"marker_suffix": ""}, "config.marker_suffix"),
        ({"marker_suffix": "a/b"}, "config.marker_suffix"),
    ],
)
def test_bad_completion_settings_are_refused_naming_the_key(tmp_path, config, field):
    with pytest.raises(InvalidInput) as refused:
        _connector(tmp_path, **config)
    assert refused.value.field == field
