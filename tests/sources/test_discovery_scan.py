"""Discovery costs what changed: known files are neither stat-ed nor sent to the database again,
no id is spent on them, and the process's copy of what is registered never hides a new file."""

import os
import re
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.models import Asset
from inventory.services.assets import assets_register
from inventory.services.connectors import connector_create
from inventory.sources import files
from inventory.sources.files import directory_discover, scan_directory
from inventory.sources.files import known as files_known

pytestmark = pytest.mark.django_db


def _old_file(path, size=8):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    past = time.time() - 600
    os.utime(path, (past, past))
    return path


def _connector(tmp_path, name="scan", **config):
    folder = tmp_path / "in"
    folder.mkdir(parents=True, exist_ok=True)
    connector = connector_create(name=name, kind="files", config={"path": str(folder), **config})
    return connector, folder


@pytest.fixture
def stats(monkeypatch):
    """Every location discovery stats."""
    seen = []
    real_file_stat, real_stat = files._file_stat, files._stat
    real_recheck_stat = files_known._stat

    def file_stat(location):
        seen.append(location)
        return real_file_stat(location)

    def plain_stat(location):
        seen.append(location)
        return real_stat(location)

    monkeypatch.setattr(files, "_file_stat", file_stat)

    def recheck_stat(location):
        seen.append(location)
        return real_recheck_stat(location)

    monkeypatch.setattr(files, "_stat", plain_stat)
    monkeypatch.setattr(files_known, "_stat", recheck_stat)
    return seen


def test_a_rescan_stats_only_new_files_and_sends_only_them(tmp_path, stats):
    connector, folder = _connector(tmp_path, recheck_seconds=0)
    for n in range(20):
        _old_file(folder / "day=1" / f"f{n:02d}.parquet")
    assert directory_discover(connector=connector) == 20
    stats.clear()

    new = _old_file(folder / "day=2" / "late.parquet")
    with CaptureQueriesContext(connection) as queries:
        assert directory_discover(connector=connector) == 1
    assert stats == [str(new)]
    sent = " ".join(str(q["sql"]) for q in queries.captured_queries)
    assert "f00.parquet" not in sent and "late.parquet" in sent

    stats.clear()
    assert directory_discover(connector=connector) == 0
    assert stats == []


def test_no_id_is_spent_on_known_files_across_many_scans(tmp_path):
    connector, folder = _connector(tmp_path)
    for n in range(5):
        _old_file(folder / f"a{n}.csv")
    assert directory_discover(connector=connector) == 5
    for _ in range(5):
        assert directory_discover(connector=connector) == 0
    _old_file(folder / "b.csv")
    assert directory_discover(connector=connector) == 1
    ids = list(
        Asset.objects.filter(connector=connector).order_by("id").values_list("id", flat=True)
    )
    assert ids == list(range(ids[0], ids[0] + 6))


def test_locations_registered_elsewhere_are_known_without_a_rescan_of_the_table(tmp_path):
    connector, folder = _connector(tmp_path)
    _old_file(folder / "one.json")
    assert directory_discover(connector=connector) == 1
    # a producer (another process) registers the next file before discovery sees it
    announced = _old_file(folder / "two.json")
    assert assets_register(connector=connector, items=[(str(announced), 8, {})]) == 1
    assert directory_discover(connector=connector) == 0
    assert Asset.objects.filter(connector=connector).count() == 2


def test_after_the_assets_are_removed_the_files_are_registered_again(tmp_path):
    connector, folder = _connector(tmp_path)
    _old_file(folder / "one.json")
    _old_file(folder / "two.json")
    assert directory_discover(connector=connector) == 2
    Asset.objects.filter(connector=connector).delete()  # what a connector reset does
    assert directory_discover(connector=connector) == 2


def test_a_changed_file_is_flagged_while_recent_and_left_alone_after_the_recheck_window(tmp_path):
    connector, folder = _connector(tmp_path, recheck_seconds=0)
    data = _old_file(folder / "orders.csv")
    assert directory_discover(connector=connector) == 1
    data.write_bytes(b"y" * 20)
    _old_file(data, size=20)
    assert directory_discover(connector=connector) == 0
    assert "changed_after_registration" not in Asset.objects.get(connector=connector).extra

    recent, folder2 = _connector(tmp_path / "b", name="recent")
    data2 = _old_file(folder2 / "orders.csv")
    assert directory_discover(connector=recent) == 1
    _old_file(data2, size=20)
    assert directory_discover(connector=recent) == 0
    assert directory_discover(connector=recent) == 0  # flagged once
    flagged = Asset.objects.get(connector=recent).extra["changed_after_registration"]
    assert flagged["size"] == 20


def test_path_patterns_match_relative_paths_and_bare_patterns_match_names_at_any_depth(tmp_path):
    for relative in ("2026/01/a.csv", "2026/01/deep/b.csv", "2025/c.csv", "x/d.json", "e.csv"):
        _old_file(tmp_path / relative)
    names = {
        tuple(sorted(os.path.relpath(loc, tmp_path) for loc, _, _ in found))
        for found in [scan_directory(path=str(tmp_path), patterns=["2026/*/*.csv"])]
    }
    assert names == {("2026/01/a.csv",)}
    every_csv = scan_directory(path=str(tmp_path), patterns=["*.csv"])
    assert len(every_csv) == 4
    under_2026 = scan_directory(path=str(tmp_path), patterns=["2026/**/*.csv"])
    assert sorted(os.path.relpath(loc, tmp_path) for loc, _, _ in under_2026) == [
        "2026/01/a.csv",
        "2026/01/deep/b.csv",
    ]


def test_rechecks_are_spread_and_a_rewrite_among_many_recent_files_is_found_within_the_bound(
    tmp_path, stats
):
    connector, folder = _connector(tmp_path, recheck_per_scan=7)
    for n in range(40):
        _old_file(folder / f"f{n:02d}.csv")
    assert directory_discover(connector=connector) == 40
    stats.clear()
    _old_file(folder / "f23.csv", size=30)  # rewritten in place: the directory's names stay
    bound = -(-40 // 7)  # ceil(files in window / recheck_per_scan) scans
    scans = 0
    while "changed_after_registration" not in Asset.objects.get(location__endswith="f23.csv").extra:
        assert scans < bound
        stats.clear()
        assert directory_discover(connector=connector) == 0
        assert len(stats) <= 7  # each scan stats a bounded slice, not the whole window
        scans += 1
    flagged = Asset.objects.get(location__endswith="f23.csv").extra["changed_after_registration"]
    assert flagged["size"] == 30 and scans > 1  # found by a later slice, not the first one
    for _ in range(2 * bound):  # flagged once; the others were all looked at and left alone
        assert directory_discover(connector=connector) == 0
    assert Asset.objects.filter(extra__has_key="changed_after_registration").count() == 1


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "10"])
def test_recheck_per_scan_must_be_a_positive_whole_number(tmp_path, value):
    from inventory.services.errors import InvalidInput

    with pytest.raises(InvalidInput, match="recheck_per_scan"):
        _connector(tmp_path, recheck_per_scan=value)


@pytest.fixture
def rechecks(monkeypatch):
    """Every location the recheck of recently registered files stats."""
    seen = []
    real = files_known._stat

    def recheck_stat(location):
        seen.append(location)
        return real(location)

    monkeypatch.setattr(files_known, "_stat", recheck_stat)
    return seen


def test_each_scan_stats_the_same_slice_however_many_files_are_in_the_window(tmp_path, rechecks):
    per_scan = []
    for window in (12, 120):
        connector, folder = _connector(
            tmp_path / str(window), name=f"w{window}", recheck_per_scan=5
        )
        for n in range(window):
            _old_file(folder / f"f{n:03d}.csv")
        assert directory_discover(connector=connector) == window
        for _ in range(4):
            rechecks.clear()
            assert directory_discover(connector=connector) == 0
            per_scan.append(len(rechecks))
    assert per_scan == [5] * 8  # ten times the files in the window, the same stats per scan


def test_a_recent_file_changed_after_the_recheck_passed_it_is_still_noticed(tmp_path, rechecks):
    connector, folder = _connector(tmp_path, recheck_per_scan=4)
    for n in range(10):
        _old_file(folder / f"f{n:02d}.csv")
    assert directory_discover(connector=connector) == 10
    looked_at = set()
    for _ in range(3):  # ceil(10 / 4): every file looked at once, unchanged
        assert directory_discover(connector=connector) == 0
        looked_at.update(rechecks)
    assert len(looked_at) == 10
    assert not Asset.objects.filter(extra__has_key="changed_after_registration").exists()
    late = _old_file(folder / "late.csv")  # registered later: joins the round
    assert directory_discover(connector=connector) == 1
    with open(folder / "f00.csv", "ab") as still_written:
        still_written.write(b"more rows")
    with open(late, "ab") as still_written:
        still_written.write(b"more rows")
    for _ in range(-(-11 // 4)):
        assert directory_discover(connector=connector) == 0
    flagged = Asset.objects.filter(extra__has_key="changed_after_registration")
    assert sorted(os.path.basename(a.location) for a in flagged) == ["f00.csv", "late.csv"]
    rechecks.clear()
    for _ in range(3):
        assert directory_discover(connector=connector) == 0
    assert str(folder / "f00.csv") not in rechecks  # flagged once, then left alone


def test_a_scan_that_finds_nothing_new_asks_the_database_one_index_lookup(tmp_path):
    connector, folder = _connector(tmp_path)
    for n in range(30):
        _old_file(folder / f"f{n:02d}.csv")
    assert directory_discover(connector=connector) == 30
    assert directory_discover(connector=connector) == 0  # the copy takes in the new rows
    with CaptureQueriesContext(connection) as queries:
        assert directory_discover(connector=connector) == 0
    sent = [str(q["sql"]) for q in queries.captured_queries]
    statement = re.sub(r"--[^\n]*", "", sent[0]).lower()
    assert len(sent) == 1 and "count(" not in statement  # not a count of every asset


def test_a_scan_after_its_own_registration_reads_nothing_back(
    tmp_path, django_capture_on_commit_callbacks
):
    connector, folder = _connector(tmp_path)
    for n in range(3):
        _old_file(folder / f"f{n}.csv")
    with django_capture_on_commit_callbacks(execute=True):
        assert directory_discover(connector=connector) == 3
    late = _old_file(folder / "late.csv", size=8)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert directory_discover(connector=connector) == 1
    assert len(callbacks) == 1  # the copy is extended only once the registration commits
    with CaptureQueriesContext(connection) as queries:
        assert directory_discover(connector=connector) == 0
    assert len(queries.captured_queries) == 1  # the copy's check; the new rows are not read back
    # the added row went to the recheck with its registered size and mtime: a rewrite is flagged
    _old_file(late, size=20)
    assert directory_discover(connector=connector) == 0
    flagged = Asset.objects.get(location=str(late)).extra["changed_after_registration"]
    assert flagged["size"] == 20


def test_a_registration_that_commits_after_another_does_not_extend_the_copy_twice(
    tmp_path, django_capture_on_commit_callbacks
):
    connector, folder = _connector(tmp_path)
    _old_file(folder / "one.csv")
    with django_capture_on_commit_callbacks(execute=True):
        assert directory_discover(connector=connector) == 1
    _old_file(folder / "two.csv")
    with django_capture_on_commit_callbacks(execute=False) as late_callbacks:
        assert directory_discover(connector=connector) == 1
    # before that callback runs, a producer registers a third file and a scan loads both rows
    third = _old_file(folder / "three.csv")
    assert assets_register(connector=connector, items=[(str(third), 8, {})]) == 1
    assert directory_discover(connector=connector) == 0
    known = files_known.known_files(connector, recheck_seconds=3600)
    before = (known.count, known.max_id)
    late_callbacks[0]()  # the late commit's rows are already in the copy: left as it is
    assert (known.count, known.max_id) == before == (3, Asset.objects.latest("id").pk)
    with CaptureQueriesContext(connection) as queries:
        assert directory_discover(connector=connector) == 0
    assert len(queries.captured_queries) == 1


def test_names_not_ascii_are_known_by_the_next_look_and_a_name_not_utf8_never_registered(
    tmp_path, stats, caplog
):
    # the walk lists a directory as bytes and compares them with the copy's names (known_name):
    # a registered name in UTF-8 beyond ASCII, in a directory named so too, is known afterwards;
    # a name in another encoding is never registered and does not stop the others
    connector, folder = _connector(tmp_path, recheck_seconds=0)
    café = _old_file(folder / "été" / "café.json")
    kanji = _old_file(folder / "日本.csv")
    latin1 = os.path.join(os.fsencode(folder), b"caf\xe9.json")
    with open(latin1, "wb") as out:
        out.write(b"{}")
    os.utime(latin1, (1, 1))
    with caplog.at_level("WARNING"):
        assert directory_discover(connector=connector) == 2
    registered = set(Asset.objects.filter(connector=connector).values_list("location", flat=True))
    assert registered == {str(café), str(kanji)}
    stats.clear()
    caplog.clear()
    with caplog.at_level("WARNING"), CaptureQueriesContext(connection) as queries:
        assert directory_discover(connector=connector) == 0
    # the known names are neither stat-ed nor sent; only the unregistrable one is looked at again
    assert stats == [os.fsdecode(latin1)]
    sent = " ".join(str(q["sql"]) for q in queries.captured_queries)
    assert "café" not in sent and "日本" not in sent
    assert "caf\\udce9.json" in " ".join(r.getMessage() for r in caplog.records)


def test_the_walk_takes_the_known_names_as_the_file_systems_bytes(tmp_path):
    from inventory.services.confinement import walk

    for name in ("a.csv", "café.csv"):
        _old_file(tmp_path / name)
    known = {str(tmp_path): {files_known.known_name("a.csv"), files_known.known_name("café.csv")}}
    assert list(walk(str(tmp_path), known=known)) == [(str(tmp_path), [])]
    copy = files_known.known_files
    connector, folder = _connector(tmp_path / "c")
    _old_file(folder / "b.csv")
    assert directory_discover(connector=connector) == 1
    names = copy(connector, recheck_seconds=3600).by_directory[str(folder)]
    assert names == {b"b.csv"}
