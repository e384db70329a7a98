"""Watermarks: typed values that never decrease by accident (invariant 4), audited corrections.

The merge rules are tested twice: as pure functions, and end to end through batch_succeed with
the watermark value a batch reports.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inventory.models import Batch, BatchStatus, Watermark, WatermarkEvent, WatermarkType
from inventory.services import lifecycle
from inventory.services.corrections import watermark_correct
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.watermarks import decreases, merge_values, parse_value
from tests.support.factories import ConnectorFactory, make_assets, make_job

# ---- value rules (the merge runs in the database: tidemark_merge_watermark) --------------------------------------------------------------------------


@pytest.mark.django_db  # the merge rule lives in PostgreSQL
def test_key_value_merge_takes_the_per_key_maximum_and_keeps_missing_keys():
    old = {"p0": 10, "p1": 5, "p2": 7}
    new = {"p0": 8, "p1": 9, "p3": 1}
    assert merge_values(WatermarkType.KEY_VALUE, old, new) == {"p0": 10, "p1": 9, "p2": 7, "p3": 1}
    assert old == {"p0": 10, "p1": 5, "p2": 7}  # the stored value is not mutated


@pytest.mark.django_db  # the merge rule lives in PostgreSQL
@given(
    old=st.dictionaries(st.sampled_from("abcdef"), st.integers(-100, 100)),
    new=st.dictionaries(st.sampled_from("abcdef"), st.integers(-100, 100)),
)
def test_a_key_value_merge_never_decreases_any_key(old, new):
    merged = merge_values(WatermarkType.KEY_VALUE, old, new)
    assert set(merged) == set(old) | set(new)
    for key, offset in merged.items():
        assert offset == max(old.get(key, offset), new.get(key, offset))
    assert decreases(WatermarkType.KEY_VALUE, old, merged) == []


def test_decreases_names_every_key_that_would_go_back_or_vanish():
    found = decreases(WatermarkType.KEY_VALUE, {"p0": 10, "p1": 5, "p2": 1}, {"p0": 3, "p1": 6})
    assert found == ["p0: 3 < 10", "p2: removed < 1"]
    assert decreases(WatermarkType.INT, 10, 9) == ["9 < 10"]
    assert decreases(WatermarkType.INT, 10, 10) == []
    assert decreases(WatermarkType.FILE_SET, ["a", "b"], ["b"]) == ["a removed"]


@pytest.mark.django_db  # the merge rule lives in PostgreSQL
def test_datetime_values_need_a_time_zone_and_merge_by_instant():
    with pytest.raises(InvalidInput) as refused:
        parse_value(WatermarkType.DATETIME, "2024-05-01T10:00:00", field="watermark_value")
    assert refused.value.field == "watermark_value"
    assert "time zone" in refused.value.message
    with pytest.raises(InvalidInput):
        parse_value(WatermarkType.DATETIME, "yesterday")

    # 10:00+02:00 is 08:00 UTC: earlier than 09:00 UTC although its text sorts later
    east = parse_value(WatermarkType.DATETIME, "2024-05-01T10:00:00+02:00")
    utc = parse_value(WatermarkType.DATETIME, "2024-05-01T09:00:00+00:00")
    assert merge_values(WatermarkType.DATETIME, utc, east) == utc
    assert decreases(WatermarkType.DATETIME, utc, east) == [f"{east} is before {utc}"]


@pytest.mark.django_db  # the merge rule lives in PostgreSQL
def test_file_set_merge_is_the_union_and_int_merge_the_maximum():
    assert merge_values(WatermarkType.FILE_SET, ["b", "a"], ["c", "a"]) == ["a", "b", "c"]
    assert parse_value(WatermarkType.FILE_SET, ["b", "a", "b"]) == ["a", "b"]
    assert merge_values(WatermarkType.INT, 7, 3) == 7
    assert merge_values(WatermarkType.INT, None, 3) == 3
    assert merge_values(WatermarkType.KEY_VALUE, {"a": 1}, None) == {"a": 1}


def test_values_of_the_wrong_shape_are_refused_naming_the_field():
    with pytest.raises(InvalidInput) as refused:
        parse_value(WatermarkType.KEY_VALUE, {"p0": "12"}, field="watermark_value")
    assert refused.value.field == "watermark_value.p0"
    with pytest.raises(InvalidInput):
        parse_value(WatermarkType.INT, True)
    with pytest.raises(InvalidInput):
        parse_value(WatermarkType.FILE_SET, "a.parquet")


# ---- end to end through batch commits ----------------------------------------------------------


def _job(count, watermark_type=WatermarkType.INT, **options):
    """A job whose budget makes every item a batch of its own."""
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * count)
    job = make_job(
        connector=connector,
        batch_weight=10,
        max_items=1,
        watermark_type=watermark_type,
        **options,
    )
    return job, assets


def _commit(job, value=None):
    batch = lifecycle.batch_acquire(job=job, worker="w")
    return lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt, watermark_value=value)


def _value(job):
    return Watermark.objects.get(job=job).value


@pytest.mark.django_db
def test_key_value_commits_merge_per_key_and_keep_keys_missing_from_a_report():
    job, _ = _job(3, WatermarkType.KEY_VALUE)
    _commit(job, {"p0": 10, "p1": 5})
    assert _value(job) == {"p0": 10, "p1": 5}
    _commit(job, {"p0": 8})  # p0 reported lower, p1 not reported
    assert _value(job) == {"p0": 10, "p1": 5}
    _commit(job, {"p1": 7, "p2": 1})
    assert _value(job) == {"p0": 10, "p1": 7, "p2": 1}
    assert WatermarkEvent.objects.filter(watermark__job=job, source="batch").count() == 3


@pytest.mark.django_db
def test_key_value_reports_of_out_of_order_commits_are_merged_when_the_prefix_reaches_them():
    job, _ = _job(2, WatermarkType.KEY_VALUE)
    first = lifecycle.batch_acquire(job=job, worker="w")
    second = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt, watermark_value={"p1": 4})
    assert _value(job) is None
    lifecycle.batch_succeed(batch_id=first.id, attempt=first.attempt, watermark_value={"p0": 3})
    assert _value(job) == {"p0": 3, "p1": 4}


@pytest.mark.django_db
def test_a_datetime_watermark_needs_a_time_zone_and_never_goes_back_through_commits():
    job, _ = _job(3, WatermarkType.DATETIME)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    with pytest.raises(InvalidInput) as refused:
        lifecycle.batch_succeed(
            batch_id=batch.id, attempt=batch.attempt, watermark_value="2024-05-01T10:00:00"
        )
    assert refused.value.field == "watermark_value"
    assert Batch.objects.get(pk=batch.id).status == BatchStatus.RUNNING
    assert _value(job) is None

    lifecycle.batch_succeed(
        batch_id=batch.id, attempt=batch.attempt, watermark_value="2024-05-01T10:00:00+00:00"
    )
    assert _value(job) == "2024-05-01T10:00:00+00:00"
    _commit(job, "2024-05-01T11:00:00+02:00")  # 09:00 UTC: late data, the watermark stays
    assert _value(job) == "2024-05-01T10:00:00+00:00"
    position_before = Watermark.objects.get(job=job).position
    _commit(job, "2024-05-01T12:00:00+00:00")
    assert _value(job) == "2024-05-01T12:00:00+00:00"
    assert Watermark.objects.get(job=job).position > position_before


@pytest.mark.django_db
def test_a_file_set_watermark_is_the_union_of_the_reported_files():
    job, _ = _job(2, WatermarkType.FILE_SET)
    _commit(job, ["b.parquet", "a.parquet"])
    _commit(job, ["c.parquet", "a.parquet"])
    assert _value(job) == ["a.parquet", "b.parquet", "c.parquet"]


# ---- corrections -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_decreasing_correction_needs_a_reason_and_a_replay_and_then_replans_later_batches():
    job, assets = _job(3)
    committed = [_commit(job) for _ in range(3)]
    assert _value(job) == assets[2].id
    events_before = WatermarkEvent.objects.filter(watermark__job=job).count()

    with pytest.raises(InvalidInput) as no_reason:
        watermark_correct(job=job, value=assets[0].id, actor="alice", reason="", replay=True)
    assert no_reason.value.field == "reason"
    with pytest.raises(InvalidInput) as no_replay:
        watermark_correct(job=job, value=assets[0].id, actor="alice", reason="bad sink output")
    assert no_replay.value.field == "replay"
    assert "replay" in no_replay.value.message
    assert _value(job) == assets[2].id
    assert WatermarkEvent.objects.filter(watermark__job=job).count() == events_before
    assert all(
        b.status == BatchStatus.SUCCEEDED for b in Batch.objects.filter(job=job, kind="incremental")
    )

    watermark_correct(
        job=job, value=assets[0].id, actor="alice", reason="bad sink output", replay=True
    )
    watermark = Watermark.objects.get(job=job)
    assert (watermark.position, watermark.value) == (assets[0].id + 1, assets[0].id)
    statuses = {b.id: b.status for b in Batch.objects.filter(job=job)}
    assert [statuses[b.id] for b in committed] == [
        BatchStatus.SUCCEEDED,
        BatchStatus.SUPERSEDED,
        BatchStatus.SUPERSEDED,
    ]
    event = WatermarkEvent.objects.filter(watermark__job=job).latest("id")
    assert (event.source, event.actor, event.reason, event.is_replay) == (
        "api",
        "alice",
        "bad sink output",
        True,
    )
    assert (event.old_value, event.new_value) == (assets[2].id, assets[0].id)

    # the superseded items are planned and committed again
    replayed = _commit(job)
    assert (replayed.span.lower, replayed.span.upper) == (
        committed[1].span.lower,
        committed[1].span.upper,
    )
    _commit(job)
    assert _value(job) == assets[2].id


@pytest.mark.django_db
def test_a_replay_must_start_at_a_batch_boundary_and_wait_for_batches_in_flight():
    connector = ConnectorFactory()
    assets = make_assets(connector, [1] * 4)
    job = make_job(connector=connector, batch_weight=2, max_items=2)
    _commit(job)  # assets 0 and 1
    with pytest.raises(InvalidInput) as inside:
        watermark_correct(job=job, value=assets[0].id, actor="a", reason="r", replay=True)
    assert inside.value.field == "value"

    lifecycle.batch_acquire(job=job, worker="w")  # assets 2 and 3, running
    with pytest.raises(Conflict):
        watermark_correct(job=job, value=job.start_position - 1, actor="a", reason="r", replay=True)
    assert _value(job) == assets[1].id


@pytest.mark.django_db
def test_a_forward_correction_covers_the_jumped_items_with_a_skipped_batch():
    job, assets = _job(5)
    _commit(job)
    watermark_correct(
        job=job, value=assets[2].id, actor="bob", reason="files 1-2 lost", source="admin"
    )

    watermark = Watermark.objects.get(job=job)
    assert (watermark.position, watermark.value) == (assets[2].id + 1, assets[2].id)
    skipped = Batch.objects.get(job=job, status=BatchStatus.SKIPPED)
    assert (skipped.span.lower, skipped.span.upper) == (assets[0].id + 1, assets[2].id + 1)
    assert "files 1-2 lost" in skipped.skip_reason
    event = WatermarkEvent.objects.filter(watermark__job=job).latest("id")
    assert (event.source, event.actor, event.reason, event.is_replay) == (
        "admin",
        "bob",
        "files 1-2 lost",
        False,
    )

    following = _commit(job)
    assert following.span.lower == assets[2].id + 1
    assert _value(job) == assets[3].id


@pytest.mark.django_db
def test_a_forward_correction_cannot_jump_over_a_running_batch():
    job, assets = _job(3)
    _commit(job)
    running = lifecycle.batch_acquire(job=job, worker="w")
    with pytest.raises(Conflict):
        watermark_correct(job=job, value=assets[2].id, actor="bob", reason="skip ahead")
    assert Batch.objects.get(pk=running.id).status == BatchStatus.RUNNING
    assert _value(job) == assets[0].id


@pytest.mark.django_db
def test_a_key_value_correction_takes_its_value_from_the_committed_batches():
    job, assets = _job(3, WatermarkType.KEY_VALUE)
    first = _commit(job, {"p0": 10, "p1": 5})
    later = [_commit(job, {"p0": 20}), _commit(job, {"p1": 9})]
    assert _value(job) == {"p0": 20, "p1": 9}

    # a value no committed boundary has (an offset set by hand) is refused, whatever the replay flag
    for made_up in ({"p0": 4, "p1": 5}, {"p0": 12, "p1": 5}, {"p0": 25, "p1": 9}):
        with pytest.raises(InvalidInput) as refused:
            watermark_correct(job=job, value=made_up, actor="a", reason="r", replay=True)
        assert refused.value.field == "value"
        assert "give a position" in refused.value.message
    # a boundary's value maps to its position; moving back is still a replay to confirm
    with pytest.raises(InvalidInput) as unconfirmed:
        watermark_correct(job=job, value={"p0": 10, "p1": 5}, actor="a", reason="reprocess")
    assert unconfirmed.value.field == "replay"
    # by position, a given value must agree with what the batches below it reported
    with pytest.raises(InvalidInput) as disagrees:
        watermark_correct(
            job=job,
            position=first.span.upper,
            value={"p0": 99, "p1": 5},
            actor="a",
            reason="reprocess",
            replay=True,
        )
    assert disagrees.value.field == "value"
    assert "'p0': 10" in disagrees.value.message
    assert WatermarkEvent.objects.filter(watermark__job=job, source="api").count() == 0

    watermark_correct(
        job=job, value={"p0": 10, "p1": 5}, actor="a", reason="reprocess", replay=True
    )
    watermark = Watermark.objects.get(job=job)
    assert (watermark.position, watermark.value) == (first.span.upper, {"p0": 10, "p1": 5})
    assert [Batch.objects.get(pk=b.pk).status for b in later] == [BatchStatus.SUPERSEDED] * 2
    event = WatermarkEvent.objects.filter(watermark__job=job, source="api").get()
    assert (event.is_replay, event.new_position) == (True, first.span.upper)
    assert assets  # the items stay registered and are planned again
    _commit(job, {"p0": 21})
    assert _value(job) == {"p0": 21, "p1": 5}


@pytest.mark.django_db
def test_a_datetime_correction_by_value_maps_to_a_boundary_and_replays_what_follows():
    job, _ = _job(3, WatermarkType.DATETIME)
    times = ["2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00", "2026-01-01T03:00:00+00:00"]
    committed = [_commit(job, t) for t in times]

    between = "2026-01-01T01:30:00+00:00"
    with pytest.raises(InvalidInput) as off_boundary:
        watermark_correct(job=job, value=between, actor="a", reason="r", replay=True)
    assert off_boundary.value.field == "value"
    assert str(committed[0].span.upper) in off_boundary.value.message  # the nearest boundaries
    assert str(committed[1].span.upper) in off_boundary.value.message

    # the same instant in another offset is the same value
    watermark_correct(
        job=job, value="2026-01-01T04:00:00+02:00", actor="a", reason="late rows", replay=True
    )
    watermark = Watermark.objects.get(job=job)
    assert watermark.position == committed[1].span.upper
    assert watermark.value == times[1]
    assert Batch.objects.get(pk=committed[2].pk).status == BatchStatus.SUPERSEDED
    assert Batch.objects.get(pk=committed[1].pk).status == BatchStatus.SUCCEEDED
    assert WatermarkEvent.objects.filter(watermark__job=job, source="api").get().is_replay

    # by position: the start has no report yet, so the value is cleared and everything replays
    watermark_correct(
        job=job, position=job.start_position, actor="a", reason="all again", replay=True
    )
    watermark = Watermark.objects.get(job=job)
    assert (watermark.position, watermark.value) == (job.start_position, None)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"value": -5}, "value"),  # the job starts at 0: position -4 would be below it
        ({"value": 2**63}, "value"),
        ({"value": 2**63 - 1}, "value"),  # its position would not fit a bigint
        ({"position": -(2**63) - 1}, "position"),
    ],
)
def test_a_correction_below_the_start_or_beyond_bigint_is_refused_naming_the_field(
    arguments, field
):
    job, _ = _job(2)
    _commit(job)
    with pytest.raises(InvalidInput) as refused:
        watermark_correct(job=job, actor="a", reason="r", replay=True, **arguments)
    assert refused.value.field == field
    if "value" in arguments and arguments["value"] > 0:
        # the message names the value given and the values allowed, not its position
        given = arguments["value"]
        assert refused.value.message == f"{given} is out of range (-{2**63} to {2**63 - 2})"
    assert Watermark.objects.get(job=job).position > job.start_position
    assert not WatermarkEvent.objects.filter(watermark__job=job, source="api").exists()


@pytest.mark.django_db
def test_every_watermark_change_leaves_an_event_with_source_actor_and_reason():
    job, assets = _job(3, max_attempts=1)
    first = lifecycle.batch_acquire(job=job, worker="worker-a")
    second = lifecycle.batch_acquire(job=job, worker="worker-b")
    lifecycle.batch_fail(batch_id=first.id, attempt=first.attempt, error={"type": "Boom"})
    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)
    lifecycle.batch_skip(batch_id=first.id, actor="carol", reason="corrupt input")
    watermark_correct(job=job, value=assets[2].id, actor="dave", reason="third file dropped")

    events = list(
        WatermarkEvent.objects.filter(watermark__job=job)
        .order_by("id")
        .values_list("source", "actor", "reason", "new_value")
    )
    assert events[0][0] == "batch"
    assert events[0][1:] == ("carol", "corrupt input", assets[1].id)
    assert events[1] == ("api", "dave", "third file dropped", assets[2].id)
    old_new = list(
        WatermarkEvent.objects.filter(watermark__job=job)
        .order_by("id")
        .values_list("old_position", "new_position")
    )
    assert old_new == [
        (job.start_position, assets[1].id + 1),
        (assets[1].id + 1, assets[2].id + 1),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"value": "12"}, "value"),
        ({"value": 1.5}, "value"),
        ({"position": "12"}, "position"),
        ({}, "value"),
    ],
)
def test_a_malformed_int_correction_is_refused_naming_the_field(arguments, field):
    job, _ = _job(1)
    with pytest.raises(InvalidInput) as refused:
        watermark_correct(job=job, actor="a", reason="r", replay=True, **arguments)
    assert refused.value.field == field
    assert not WatermarkEvent.objects.filter(watermark__job=job).exists()


@pytest.mark.django_db
def test_a_correction_by_position_inside_a_batch_names_position_and_its_boundaries():
    # given a position, the answer named `value` and offered values (position - 1), which a
    # key_value or datetime watermark does not even have
    connector = ConnectorFactory()
    make_assets(connector, [10] * 4)
    job = make_job(
        connector=connector, batch_weight=20, max_items=2, watermark_type=WatermarkType.KEY_VALUE
    )
    batch = _commit(job, {"p0": 1})
    _commit(job, {"p0": 2})
    inside = batch.span.lower + 1
    with pytest.raises(InvalidInput) as refused:
        watermark_correct(job=job, position=inside, actor="a", reason="r", replay=True)
    assert refused.value.field == "position"
    assert f"position {inside} is inside batch {batch.pk}" in refused.value.message
    assert f"position {batch.span.lower} or {batch.span.upper}" in refused.value.message
