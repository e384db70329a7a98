"""The soak's checker cannot pass a wrong run: each kind of error, planted on a purpose-built run,
is named; the correct run passes. Pure logic (the checker imports neither Django nor Spark), plus
its readers on a real files-sink layout and a real PostgreSQL table."""

import json
from dataclasses import replace

import pytest

from bench import soak_checker as sc

# a job of 6 items (ids 10..15) in 3 batches of 2; batch 2 needed a second attempt
START = 10
SOURCES = [sc.SourceRow(f"k{i}", sc.checksum(f"k{i}", f"value {i}"), i) for i in range(10, 16)]
BATCHES = [
    sc.BatchFact(1, 10, 12, "succeeded", 1),
    sc.BatchFact(2, 12, 14, "succeeded", 2),
    sc.BatchFact(3, 14, 16, "succeeded", 1),
]


def _owner(item):
    return next(b for b in BATCHES if b.lo <= item < b.hi)


def _correct_rows():
    return [
        sc.SinkRow(s.key, s.checksum, _owner(s.item).id, _owner(s.item).attempt) for s in SOURCES
    ]


def _check(rows=None, *, batches=None, watermark=16):
    job = sc.JobFacts("soak", START, watermark, BATCHES if batches is None else batches)
    return sc.check(
        sources={"soak": SOURCES},
        jobs={"soak": job},
        sinks={"files": ("soak", _correct_rows() if rows is None else rows)},
    )


def test_a_correct_run_passes():
    report = _check()
    assert report.ok
    assert report.failures() == []
    assert report.summary()["sinks"]["files"] == {
        "rows_seen": 6,
        "lost": 0,
        "duplicated": 0,
        "unexpected": 0,
        "altered": 0,
        "stale": 0,
    }


def test_a_lost_row_is_named():
    report = _check(_correct_rows()[:3] + _correct_rows()[4:])
    assert not report.ok
    assert report.sinks["files"].lost == ["k13"]
    assert report.failures() == ["files: 1 lost, e.g. ['k13']"]


def test_a_duplicated_row_is_named():
    rows = _correct_rows()
    report = _check(rows + [rows[0]])
    assert (report.ok, report.sinks["files"].duplicated) == (False, ["k10"])


def test_an_unexpected_row_is_named():
    report = _check(_correct_rows() + [sc.SinkRow("k99", sc.checksum("k99"), 3, 1)])
    assert (report.ok, report.sinks["files"].unexpected) == (False, ["k99"])


def test_an_altered_row_is_named():
    rows = _correct_rows()
    rows[2] = replace(rows[2], checksum=sc.checksum("k12", "value 12 changed"))
    report = _check(rows)
    assert (report.ok, report.sinks["files"].altered) == (False, ["k12"])
    assert report.sinks["files"].stale == []  # right writer, wrong content


def test_a_stale_attempts_output_is_named():
    """Batch 2 committed attempt 2; a zombie's attempt 1 wrote the same content over it."""
    rows = _correct_rows()
    rows[3] = replace(rows[3], attempt=1)
    report = _check(rows)
    assert (report.ok, report.sinks["files"].stale) == (False, ["k13"])
    assert report.sinks["files"].altered == []  # same content, wrong writer: still a failure


def test_output_of_an_uncommitted_batch_is_named():
    batches = [*BATCHES[:2], replace(BATCHES[2], status="failed")]
    report = _check(batches=batches, watermark=14)
    assert report.jobs["soak"].ok
    assert (report.ok, report.sinks["files"].stale) == (False, ["k14", "k15"])


def test_a_row_written_under_another_batch_is_named():
    rows = _correct_rows()
    rows[0] = replace(rows[0], batch_id=3)
    assert _check(rows).sinks["files"].stale == ["k10"]


@pytest.mark.parametrize("watermark", [14, 18, None])
def test_a_watermark_other_than_the_committed_prefix_is_named(watermark):
    report = _check(watermark=watermark)
    assert not report.ok and report.sinks["files"].ok
    assert report.jobs["soak"].committed_prefix_end == 16
    assert "is not the end of the contiguous committed prefix (16)" in report.failures()[0]


def test_the_watermark_stops_in_front_of_a_dead_batch_and_at_a_gap():
    dead = [BATCHES[0], replace(BATCHES[1], status="dead"), BATCHES[2]]
    assert sc.committed_prefix_end(sc.JobFacts("j", START, None, dead)) == 12
    gap = [BATCHES[0], BATCHES[2]]
    assert sc.committed_prefix_end(sc.JobFacts("j", START, None, gap)) == 12
    skipped = [BATCHES[0], replace(BATCHES[1], status="skipped"), BATCHES[2]]
    assert sc.committed_prefix_end(sc.JobFacts("j", START, None, skipped)) == 16


def test_overlapping_committed_batches_are_named():
    batches = [*BATCHES, sc.BatchFact(4, 13, 15, "succeeded", 1)]
    report = _check(batches=batches)
    assert not report.ok
    assert report.jobs["soak"].overlaps == [(2, 4), (4, 3)]


def _backfilled():
    """Batches 1 and 2 (items 10..13) rewritten by a backfill's batch 4 over the same range."""
    return [
        replace(BATCHES[0], replaced_by=4),
        replace(BATCHES[1], replaced_by=4),
        BATCHES[2],
        sc.BatchFact(4, 10, 14, "succeeded", 1),
    ]


def test_a_backfill_over_committed_batches_owns_their_items():
    rows = [
        replace(r, batch_id=4, attempt=1) if r.batch_id in (1, 2) else r for r in _correct_rows()
    ]
    report = _check(rows, batches=_backfilled())
    assert report.ok, report.failures()
    assert report.jobs["soak"].overlaps == []  # the replaced batches cover nothing any more
    assert report.jobs["soak"].committed_prefix_end == 16


def test_the_output_of_a_replaced_batch_is_stale():
    """A row the backfill should have rewritten still carries the replaced batch's write."""
    rows = [replace(r, batch_id=4, attempt=1) if r.batch_id == 2 else r for r in _correct_rows()]
    report = _check(rows, batches=_backfilled())
    assert (report.ok, report.sinks["files"].stale) == (False, ["k10", "k11"])


def test_a_replacement_that_did_not_commit_leaves_its_range_uncovered():
    batches = [*_backfilled()[:3], replace(_backfilled()[3], status="failed")]
    report = _check(batches=batches, watermark=10)
    assert report.jobs["soak"].committed_prefix_end == 10
    assert report.sinks["files"].stale == ["k10", "k11", "k12", "k13"]


def test_the_command_line_exits_non_zero_on_any_failure(tmp_path, capsys):
    def document(rows, watermark=16):
        return {
            "sources": {"soak": [[s.key, s.checksum, s.item] for s in SOURCES]},
            "jobs": {
                "soak": {
                    "start": START,
                    "watermark": watermark,
                    "batches": [[b.id, b.lo, b.hi, b.status, b.attempt] for b in BATCHES],
                }
            },
            "sinks": {
                "files": {
                    "job": "soak",
                    "rows": [[r.key, r.checksum, r.batch_id, r.attempt] for r in rows],
                }
            },
        }

    run = tmp_path / "run.json"
    run.write_text(json.dumps(document(_correct_rows())))
    assert sc.main([str(run)]) == 0
    stale = _correct_rows()
    stale[3] = replace(stale[3], attempt=1)
    run.write_text(json.dumps(document(stale)))
    assert sc.main([str(run)]) == 1
    assert "files: 1 stale" in capsys.readouterr().err
    run.write_text(json.dumps(document(_correct_rows(), watermark=12)))
    assert sc.main([str(run)]) == 1


def test_the_files_reader_sees_what_spark_sees_and_recomputes_checksums(tmp_path):
    """Published batch directories are read; staging and marker files (`_`, `.`) are not; a row
    whose content changed after it was written is altered."""

    def record(n, batch, attempt, value=None):
        return {
            "row_id": f"r{n}",
            "key": f"k{n}",
            "value": value or f"value {n}",
            "src_batch": batch,
            "src_attempt": attempt,
        }  # `note` is null: Spark's JSON writer leaves it out

    sources = [
        sc.SourceRow(f"r{n}", sc.checksum(f"r{n}", f"k{n}", f"value {n}", None), n)
        for n in (10, 11)
    ]
    job = sc.JobFacts("j", 10, 12, [sc.BatchFact(7, 10, 12, "succeeded", 2)])
    part = tmp_path / "batch_id=7" / "part-0000.json"
    part.parent.mkdir()
    part.write_text("\n".join(json.dumps(record(n, 7, 2)) for n in (10, 11)) + "\n")
    staged = tmp_path / "_staging" / "batch_id=7-a1-abc" / "part-0000.json"
    staged.parent.mkdir(parents=True)
    staged.write_text(json.dumps(record(10, 7, 1)))
    (tmp_path / "batch_id=7" / ".part-0000.json.crc").write_text("crc")

    seen = sc.read_json_lines_sink(tmp_path)
    assert sorted(r.key for r in seen) == ["r10", "r11"]
    assert sc.check_sink(sources, seen, job).ok

    part.write_text(json.dumps(record(10, 7, 2)) + "\n" + json.dumps(record(11, 7, 2, "edited")))
    verdict = sc.check_sink(sources, sc.read_json_lines_sink(tmp_path), job)
    assert verdict.altered == ["r11"] and not verdict.ok


def test_the_delta_reader_sees_the_latest_version_only(tmp_path):
    """A row a later Delta version removed is not seen; one it added with other content is
    altered (a real Delta table, written with delta-rs)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    def table(value):
        return pa.Table.from_pylist(
            [
                {
                    "row_id": "r10",
                    "key": "k10",
                    "value": value,
                    "note": None,
                    "src_batch": 7,
                    "src_attempt": 2,
                },
            ]
        )

    sources = [sc.SourceRow("r10", sc.checksum("r10", "k10", "value 10", None), 10)]
    job = sc.JobFacts("j", 10, 11, [sc.BatchFact(7, 10, 11, "succeeded", 2)])
    write_deltalake(str(tmp_path), table("stale value"))
    write_deltalake(str(tmp_path), table("value 10"), mode="overwrite")
    assert sc.check_sink(sources, sc.read_delta_sink(tmp_path), job).ok

    write_deltalake(str(tmp_path), table("edited"), mode="append")
    verdict = sc.check_sink(sources, sc.read_delta_sink(tmp_path), job)
    assert (verdict.duplicated, verdict.altered) == (["r10"], ["r10"])


def _record(row_id, value, batch=7, attempt=1):
    return {
        "row_id": row_id,
        "key": f"k{row_id[1:]}",
        "value": value,
        "note": None,
        "src_batch": batch,
        "src_attempt": attempt,
    }


ROW_SOURCES = [
    sc.SourceRow(f"r{i}", sc.checksum(f"r{i}", f"k{i}", f"value {i}", None), i) for i in (10, 11)
]


def _versions(*states):
    """Versions as a reader sees them, from states of {row_id: value}."""
    return [
        (f"version {n}", [sc.sink_row(_record(r, v), identity="row_id") for r, v in rows])
        for n, rows in enumerate(states)
    ]


def _check_versions(versions):
    job = sc.JobFacts("j", 10, 12, [sc.BatchFact(7, 10, 12, "succeeded", 1)])
    last = versions[-1][1]
    return sc.check(
        sources={"j": ROW_SOURCES},
        jobs={"j": job},
        sinks={"t": ("j", last)},
        versions={"t": versions},
    ).sinks["t"]


def test_a_row_twice_gone_or_altered_at_an_older_version_fails_the_run():
    good = [("r10", "value 10")]
    both = [("r10", "value 10"), ("r11", "value 11")]
    verdict = _check_versions(_versions([], good, both))
    assert verdict.ok and verdict.versions == 3

    # the final version is right each time; an older one is not
    twice = _check_versions(_versions(good, [*good, *good], both))
    assert twice.version_twice == ["version 1: r10"] and not twice.ok
    # a rewrite made as a delete, then an insert: a reader of version 1 misses r10
    gone = _check_versions(_versions(good, [], both))
    assert gone.version_gone == ["version 1: r10"] and not gone.ok
    altered = _check_versions(_versions([("r10", "half written")], both))
    assert altered.version_altered == ["version 0: r10"] and not altered.ok
    report = sc.Report(sinks={"t": gone}, jobs={})
    assert report.summary()["sinks"]["t"]["version_gone"] == 1
    assert any("version_gone" in line for line in report.failures())


def test_the_version_readers_read_each_delta_version_and_iceberg_snapshot(tmp_path):
    """Real tables: Delta written with delta-rs, Iceberg with pyiceberg (a SQLite catalog)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from workers.spark.iceberg_catalog import catalog_from

    schema = pa.schema(
        [(c, pa.string()) for c in ("row_id", "key", "value", "note")]
        + [("src_batch", pa.int64()), ("src_attempt", pa.int64())]
    )
    first = pa.Table.from_pylist([_record("r10", "value 10")], schema=schema)
    both = pa.Table.from_pylist(
        [_record("r10", "value 10"), _record("r11", "value 11")], schema=schema
    )
    write_deltalake(str(tmp_path / "delta"), first)
    write_deltalake(str(tmp_path / "delta"), first, mode="append")  # r10 twice at version 1
    write_deltalake(str(tmp_path / "delta"), both, mode="overwrite")
    versions = sc.delta_versions(tmp_path / "delta")
    assert [len(rows) for _, rows in versions] == [1, 2, 2]
    verdict = _check_versions(versions)
    assert verdict.version_twice == ["version 1: r10"] and verdict.version_gone == []

    sink = {
        "kind": "iceberg",
        "catalog_uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": str(tmp_path / "warehouse"),
        "table": "soak.rows",
    }
    catalog = catalog_from(sink)
    catalog.create_namespace("soak")
    table = catalog.create_table("soak.rows", schema=first.schema)
    table.append(first)
    table.delete("row_id == 'r10'")  # a rewrite as a delete, then an insert
    table.append(both)
    versions = sc.iceberg_versions(sink)
    assert [sorted(r.key for r in rows) for _, rows in versions] == [
        ["r10"],
        [],
        ["r10", "r11"],
    ]
    verdict = _check_versions(versions)
    assert verdict.version_gone == [f"{versions[1][0]}: r10"] and verdict.version_twice == []
    latest = sc.read_iceberg_sink(sink)
    assert sorted(r.key for r in latest) == ["r10", "r11"]


# ---- a key_value watermark (a Kafka topic's {partition: end offset}) ----------------------------

# the six items are offset slices of two partitions: 10, 12, 14 of partition 0, the others of 1
SLICES = {10: {"0": 4}, 11: {"1": 3}, 12: {"0": 8}, 13: {"1": 6}, 14: {"0": 9}, 15: {"1": 7}}


def _check_value(value, *, batches=None, watermark=16):
    job = sc.JobFacts(
        "soak",
        START,
        watermark,
        BATCHES if batches is None else batches,
        value=value,
        item_values=SLICES,
    )
    return sc.check_job(job)


def test_a_key_value_watermark_at_the_prefixs_per_partition_maximum_passes():
    verdict = _check_value({"0": 9, "1": 7})
    assert verdict.ok and verdict.prefix_value == {"0": 9, "1": 7}
    # behind a dead batch, the prefix ends at 12: only the first batch's slices count
    dead = [BATCHES[0], replace(BATCHES[1], status="dead"), BATCHES[2]]
    assert _check_value({"0": 4, "1": 3}, batches=dead, watermark=12).ok


@pytest.mark.parametrize(
    "value",
    [
        {"0": 8, "1": 7},  # a partition behind: its last slice's messages would be read again
        {"0": 9, "1": 7, "2": 1},  # a partition no committed slice read
        {"0": 9},  # a partition forgotten
        None,  # no value at all
    ],
)
def test_a_key_value_watermark_other_than_the_prefixs_maximum_is_named(value):
    job = sc.JobFacts("soak", START, 16, BATCHES, value=value, item_values=SLICES)
    report = sc.check(sources={"soak": SOURCES}, jobs={"soak": job}, sinks={})
    assert not report.ok
    assert report.failures() == [
        f"job soak: watermark value {value or {}} is not the per-key maximum over the contiguous "
        "committed prefix ({'0': 9, '1': 7})"
    ]


def test_a_key_value_watermark_past_an_uncommitted_batch_is_named():
    """The last batch failed: its slices' offsets must not be in the value (they were not read)."""
    failed = [*BATCHES[:2], replace(BATCHES[2], status="failed")]
    verdict = _check_value({"0": 9, "1": 7}, batches=failed, watermark=14)
    assert not verdict.ok and verdict.prefix_value == {"0": 8, "1": 6}


def test_the_command_line_checks_a_key_value_watermark(tmp_path):
    document = {
        "sources": {"soak": []},
        "jobs": {
            "soak": {
                "start": START,
                "watermark": 16,
                "batches": [[b.id, b.lo, b.hi, b.status, b.attempt] for b in BATCHES],
                "value": {"0": 9, "1": 6},
                "item_values": {str(i): v for i, v in SLICES.items()},
            }
        },
        "sinks": {},
    }
    run = tmp_path / "run.json"
    run.write_text(json.dumps(document))
    assert sc.main([str(run)]) == 1
    document["jobs"]["soak"]["value"] = {"0": 9, "1": 7}
    run.write_text(json.dumps(document))
    assert sc.main([str(run)]) == 0


# ---- a replay: the watermark moved back, the batches after it superseded and planned again ------


def _replayed(*, replaced=True):
    """The watermark moved back to 14: batch 3 (items 14..15) superseded, batch 5 rewrote them
    and, publishing, replaced its output (`replaced=False`: the inventory forgot to)."""
    return [
        *BATCHES[:2],
        replace(BATCHES[2], status="superseded", replaced_by=5 if replaced else None),
        sc.BatchFact(5, 14, 16, "succeeded", 1),
    ]


def _replay_rows():
    return [replace(r, batch_id=5, attempt=1) if r.batch_id == 3 else r for r in _correct_rows()]


def test_a_replay_whose_new_output_replaced_the_old_passes():
    report = _check(_replay_rows(), batches=_replayed())
    assert report.ok, report.failures()
    assert report.jobs["soak"].committed_prefix_end == 16


def test_a_replay_that_left_the_old_output_beside_the_new_is_named():
    """Batch 3's rows are still in the sink next to batch 5's: each source row twice."""
    old = [r for r in _correct_rows() if r.batch_id == 3]
    report = _check(_replay_rows() + old, batches=_replayed())
    files = report.sinks["files"]
    assert not report.ok
    assert (files.duplicated, files.stale) == (["k14", "k15"], ["k14", "k15"])


def test_a_superseded_batchs_output_that_stayed_in_place_of_the_new_is_stale():
    """The replay's batch committed, but the sink still shows the superseded batch's rows."""
    report = _check(_correct_rows(), batches=_replayed())
    assert (report.ok, report.sinks["files"].stale) == (False, ["k14", "k15"])
    assert report.sinks["files"].duplicated == []


def test_a_superseded_batch_is_not_committed():
    """Before the replay's batch commits, the watermark stands at the replay's position and the
    superseded batch's rows belong to no committed batch (its output must not count as one)."""
    batches = [*BATCHES[:2], replace(BATCHES[2], status="superseded")]
    report = _check(batches=batches, watermark=14)
    assert report.jobs["soak"].ok and report.jobs["soak"].committed_prefix_end == 14
    assert report.sinks["files"].stale == ["k14", "k15"]
    assert _check(batches=batches, watermark=16).jobs["soak"].committed_prefix_end == 14


def test_a_superseded_output_the_inventory_left_standing_is_named():
    """Right rows in the sink, but the inventory still counts batch 3's output as standing beside
    batch 5's (a later backfill or replay would plan around an output that is gone)."""
    report = _check(_replay_rows(), batches=_replayed(replaced=False))
    assert report.sinks["files"].ok and not report.ok
    assert report.jobs["soak"].left_standing == [(3, 5)]
    assert report.failures() == [
        "job soak: outputs left standing beside the batch that owns their items (old, owner): "
        "[(3, 5)]"
    ]
    # not yet replanned (no owner), or never published: nothing is left standing
    waiting = [*BATCHES[:2], replace(BATCHES[2], status="superseded")]
    assert _check(_replay_rows(), batches=waiting, watermark=14).jobs["soak"].left_standing == []
    unpublished = [
        *_replayed(replaced=False)[:2],
        replace(_replayed()[2], replaced_by=None, published=False),
        _replayed()[3],
    ]
    assert _check(_replay_rows(), batches=unpublished).ok


def test_the_command_line_reads_replaced_by_and_published(tmp_path):
    batches = _replayed(replaced=False)
    document = {
        "sources": {"soak": [[s.key, s.checksum, s.item] for s in SOURCES]},
        "jobs": {
            "soak": {
                "start": START,
                "watermark": 16,
                "batches": [
                    [b.id, b.lo, b.hi, b.status, b.attempt, b.replaced_by, b.published]
                    for b in batches
                ],
            }
        },
        "sinks": {
            "files": {
                "job": "soak",
                "rows": [[r.key, r.checksum, r.batch_id, r.attempt] for r in _replay_rows()],
            }
        },
    }
    run = tmp_path / "run.json"
    run.write_text(json.dumps(document))
    assert sc.main([str(run)]) == 1
    document["jobs"]["soak"]["batches"][2][5] = 5
    run.write_text(json.dumps(document))
    assert sc.main([str(run)]) == 0
