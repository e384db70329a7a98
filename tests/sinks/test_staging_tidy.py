"""The files sink's tidy of `_staging/` (workers/spark/sinks.py, `_tidy_staging`) decided from
what the control plane answers, on directories made by hand: the cases a kill or a failed delete
can leave, where it must never empty a place that holds a recorded output."""

from pathlib import Path

from workers.spark.fence import Output, Replaced
from workers.spark.sink_files import HadoopFiles, LocalFiles
from workers.spark.sinks import _tidy_staging


def _dir(path: Path, marker: str) -> Path:
    path.mkdir(parents=True)
    (path / "part-0.parquet").write_text(marker)
    return path


def _answers(**batches: Output):
    """A publish's `replaced` whose control plane answers `batches` (b<id>=Output(...))."""
    known = {int(key[1:]): value for key, value in batches.items()}
    return Replaced([], outputs=lambda ids: {i: known[i] for i in ids if i in known})


def _shown(published: int, *, attempt: int = 1, running: bool = False) -> Output:
    return Output(published, True, attempt, running)


def _names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_a_restored_output_stays_when_an_aside_of_the_same_swap_could_not_be_deleted(tmp_path):
    """An earlier tidy put batch 10's committed output back, but the delete of another aside of
    that swap failed (left partly there): the next tidy deletes that aside and leaves batch 10's
    place alone, as it holds what the control plane records."""
    out = tmp_path / "out"
    _dir(out / "batch_id=10", "attempt 1, recorded")
    _dir(out / "_staging" / "replaced-batch_id=11-by-10-a2-0123456789ab", "replaced long ago")
    replaced = _answers(b10=_shown(1, attempt=2), b11=Output(1, False, 1, False))
    assert _tidy_staging(LocalFiles(), str(out), replaced)
    assert (out / "batch_id=10" / "part-0.parquet").read_text() == "attempt 1, recorded"
    assert _names(out / "_staging") == []


def test_an_own_aside_is_kept_when_its_place_could_not_be_emptied(tmp_path):
    """The killed attempt's output could not be deleted from the batch's place (a delete that
    failed): the batch's committed output stays aside rather than being taken for a duplicate."""

    class StuckDeletes(LocalFiles):
        def delete(self, uri: str) -> None:
            if not uri.endswith("batch_id=10"):
                super().delete(uri)

    out = tmp_path / "out"
    _dir(out / "batch_id=10", "attempt 2, never recorded")
    aside = _dir(out / "_staging" / "replaced-batch_id=10-by-10-a2-0123456789ab", "attempt 1")
    replaced = _answers(b10=_shown(1, attempt=2))
    assert _tidy_staging(StuckDeletes(), str(out), replaced)
    assert (aside / "part-0.parquet").read_text() == "attempt 1"
    # a later tidy whose delete works finishes the undo
    assert _tidy_staging(LocalFiles(), str(out), replaced)
    assert (out / "batch_id=10" / "part-0.parquet").read_text() == "attempt 1"
    assert _names(out / "_staging") == []


def test_a_half_undone_swap_is_finished_and_a_committed_one_only_loses_its_asides(tmp_path):
    out = tmp_path / "out"
    # batch 20's attempt 3 was killed mid-swap: batch 21's output aside, its own output in place;
    # an earlier tidy was killed after putting batch 22's output back
    _dir(out / "batch_id=20", "attempt 3, never recorded")
    _dir(out / "_staging" / "replaced-batch_id=21-by-20-a3-aaaaaaaaaaaa", "batch 21")
    _dir(out / "batch_id=22", "batch 22")
    # batch 30's attempt 1 committed; its worker died before deleting what it replaced
    _dir(out / "batch_id=30", "batch 30")
    _dir(out / "_staging" / "replaced-batch_id=31-by-30-a1-bbbbbbbbbbbb", "batch 31, replaced")
    replaced = _answers(
        b20=Output(None, False, 3, False),
        b21=_shown(1),
        b22=_shown(1),
        b30=_shown(1),
        b31=Output(1, False, 1, False),
    )
    assert _tidy_staging(LocalFiles(), str(out), replaced)
    assert _names(out) == ["_staging", "batch_id=21", "batch_id=22", "batch_id=30"]
    assert _names(out / "_staging") == []


def test_staging_is_kept_for_running_attempts_other_jobs_and_old_names(tmp_path):
    out = tmp_path / "out"
    for name in (
        "batch_id=40-a2-cccccccccccc",  # batch 40 runs attempt 2: being written
        "batch_id=40-a1-dddddddddddd",  # its attempt 1, dead
        "batch_id=41-a1-eeeeeeeeeeee",  # batch 41 ended
        "batch_id=99-a1-ffffffffffff",  # another job's batch: not answered
        "replaced-batch_id=41-0123456789ab",  # an earlier release's name: its own rule
    ):
        _dir(out / "_staging" / name, name)
    replaced = _answers(b40=Output(None, False, 2, True), b41=_shown(1))
    assert _tidy_staging(LocalFiles(), str(out), replaced)
    assert _names(out / "_staging") == [
        "batch_id=40-a2-cccccccccccc",
        "batch_id=99-a1-ffffffffffff",
        "replaced-batch_id=41-0123456789ab",
    ]


def test_nothing_is_tidied_without_a_control_plane_or_on_renames_that_copy(tmp_path):
    out = tmp_path / "out"
    _dir(out / "_staging" / "batch_id=50-a1-0123456789ab", "dead")

    class CopyingRenames(LocalFiles):
        atomic_renames = False  # as an object store's, file by file

    replaced = _answers(b50=_shown(1))
    assert not _tidy_staging(LocalFiles(), str(out), Replaced([]))
    assert not _tidy_staging(LocalFiles(), str(out), [])  # a hand-made publish's plain list
    assert not _tidy_staging(CopyingRenames(), str(out), replaced)
    assert _names(out / "_staging") == ["batch_id=50-a1-0123456789ab"]


def test_hadoops_rename_refuses_an_existing_target_and_knows_its_renames_are_whole(spark, tmp_path):
    """Hadoop's rename onto an existing directory would move the source into it: refused, as
    the local one refuses. The local file system's renames are one step."""
    source = _dir(tmp_path / "a", "a")
    target = _dir(tmp_path / "b", "b")
    files = HadoopFiles(spark, f"file://{tmp_path}")
    assert files.atomic_renames
    assert not files.rename(f"file://{source}", f"file://{target}")
    assert _names(target) == ["part-0.parquet"] and source.exists()
    assert files.rename(f"file://{source}", f"file://{tmp_path / 'c'}")
    assert (tmp_path / "c" / "part-0.parquet").read_text() == "a"
