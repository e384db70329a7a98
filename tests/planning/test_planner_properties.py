"""The planner against a reference model, on random weights, budgets, caps and id gaps.

The reference is the greedy rule of docs/design.md in plain Python: take items in id order while the
summed weight stays within the budget (always at least one item) and the count within the cap.
Every example writes its items inside a savepoint that is rolled back, on one connection.
"""

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Asset, Batch, BatchStatus
from inventory.services import lifecycle
from inventory.services.planning import plan_closed_range, plan_step
from inventory.sources.items import assets_source
from tests.support.factories import ConnectorFactory, make_job

EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def reference_batches(weights, budget, cap):
    """Indexes of the items of each batch, by the greedy rule."""
    planned, current, total = [], [], 0
    for index, weight in enumerate(weights):
        if current and (total + weight > budget or len(current) >= cap):
            planned.append(current)
            current, total = [], 0
        current.append(index)
        total += weight
    if current:
        planned.append(current)
    return planned


def expected_ranges(ids, weights, budget, cap, *, start, end):
    """(lower, upper, count, weight) of each batch over the items with start <= id < end.

    The first range starts at `start`, each next one right after the previous batch's last item;
    the last one reaches `end` (or just past its last item when the stretch is open)."""
    inside = [
        (i, w)
        for i, w in zip(ids, weights, strict=False)
        if i >= start and (end is None or i < end)
    ]
    ranges, lower = [], start
    groups = reference_batches([w for _, w in inside], budget, cap)
    for number, group in enumerate(groups):
        last_id = inside[group[-1]][0]
        upper = end if number == len(groups) - 1 and end is not None else last_id + 1
        ranges.append((lower, upper, len(group), sum(inside[k][1] for k in group)))
        lower = upper
    return ranges


def _as_tuples(planned):
    return [(p.lower, p.upper, p.item_count, p.weight) for p in planned]


def _check_shape(ranges, budget, cap):
    for (lower, upper, count, weight), following in zip(ranges, ranges[1:] + [None], strict=False):
        assert lower < upper and 1 <= count <= cap
        assert weight <= budget or count == 1, "over budget with more than one item"
        if following:
            assert following[0] == upper, "ranges must be contiguous"


weights_strategy = st.lists(
    st.one_of(st.just(0), st.integers(0, 30), st.integers(31, 120)), max_size=30
)


@st.composite
def item_sets(draw):
    """Weights, and ascending ids with gaps (ids come from a sequence shared with deletions)."""
    weights = draw(weights_strategy)
    gaps = draw(st.lists(st.integers(1, 3), min_size=len(weights), max_size=len(weights)))
    first = draw(st.integers(1, 50))
    ids, current = [], first
    for gap in gaps:
        ids.append(current)
        current += gap
    return ids, weights


def _insert(connector, ids, weights):
    Asset.objects.bulk_create(
        Asset(id=i, connector=connector, location=f"/p/{i}", weight=w)
        for i, w in zip(ids, weights, strict=False)
    )


@pytest.fixture
def connector(db):
    return ConnectorFactory()


@EXAMPLES
@given(
    items=item_sets(),
    budget=st.integers(1, 100),
    cap=st.integers(1, 7),
    bounds=st.tuples(st.integers(-3, 120), st.integers(0, 120)),
)
def test_a_closed_range_plan_equals_the_reference(connector, items, budget, cap, bounds):
    ids, weights = items
    first, length = bounds
    last = first + length
    with transaction.atomic():
        _insert(connector, ids, weights)
        planned = _as_tuples(
            plan_closed_range(
                source=assets_source(connector.pk),
                first=first,
                last=last,
                budget=budget,
                max_items=cap,
            )
        )
        transaction.set_rollback(True)
    assert planned == expected_ranges(ids, weights, budget, cap, start=first, end=last + 1)
    _check_shape(planned, budget, cap)
    assert sum(p[2] for p in planned) == sum(1 for i in ids if first <= i <= last)


@EXAMPLES
@given(
    items=item_sets(),
    budget=st.integers(1, 100),
    cap=st.integers(1, 7),
    start=st.integers(0, 60),
    bound=st.one_of(st.none(), st.integers(1, 120)),
)
def test_repeated_plan_steps_equal_the_reference(connector, items, budget, cap, start, bound):
    ids, weights = items
    upper = None if bound is None else start + bound
    steps = []
    with transaction.atomic():
        _insert(connector, ids, weights)
        lower = start
        while len(steps) <= len(ids):
            step = plan_step(
                source=assets_source(connector.pk),
                lower=lower,
                upper=upper,
                budget=budget,
                max_items=cap,
            )
            if step is None:
                break
            steps.append(step)
            lower = step.upper
        transaction.set_rollback(True)
    planned = _as_tuples(steps)
    assert planned == expected_ranges(ids, weights, budget, cap, start=start, end=upper)
    _check_shape(planned, budget, cap)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(items=item_sets(), budget=st.integers(1, 100), cap=st.integers(1, 7))
def test_acquiring_until_empty_takes_exactly_the_reference_batches(connector, items, budget, cap):
    ids, weights = items
    with transaction.atomic():
        _insert(connector, ids, weights)
        job = make_job(connector=connector, batch_weight=budget, max_items=cap)
        taken = []
        while len(taken) <= len(ids):
            batch = lifecycle.batch_acquire(job=job, worker="w")
            if batch is None:
                break
            taken.append(batch)
            if len(taken) % 2:  # commit some; planning goes on after the last live batch
                lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
        statuses = set(Batch.objects.filter(job=job).values_list("status", flat=True))
        transaction.set_rollback(True)
    planned = [(b.span.lower, b.span.upper, b.item_count, b.weight) for b in taken]
    assert planned == expected_ranges(ids, weights, budget, cap, start=job.start_position, end=None)
    assert statuses <= {BatchStatus.RUNNING, BatchStatus.SUCCEEDED}


def test_the_reference_itself_follows_the_rule():
    # a heavy item makes a batch of its own (nothing more fits beside it); zeros ride along
    assert reference_batches([5, 50, 0, 0, 3, 4], budget=10, cap=3) == [[0], [1], [2, 3, 4], [5]]
    assert reference_batches([], budget=10, cap=3) == []
    assert reference_batches([0, 0, 0, 0], budget=1, cap=2) == [[0, 1], [2, 3]]


@EXAMPLES
@given(
    items=item_sets(),
    owners=st.lists(st.sampled_from("bta"), min_size=30, max_size=30),
    budget=st.integers(1, 100),
    cap=st.integers(1, 7),
    bounds=st.tuples(st.integers(-3, 120), st.one_of(st.none(), st.integers(0, 120))),
    many=st.sampled_from([1, 2, None]),
)
def test_prefix_sum_planning_among_other_connectors_assets_equals_the_item_walk(
    db, items, owners, budget, cap, bounds, many
):
    """The assets of a connector before and after it (by connector id) lie between its own ids:
    the index searches of tidemark_plan_assets must never step into them. Planned both ways in
    the database, the prefix-sum searches and the walk over the item query (tidemark_plan_batches,
    the planner of meta tables), and against the reference."""
    from django.db import connection

    ids, weights = items
    first, length = bounds
    end = None if length is None else first + length + 1
    with transaction.atomic():
        before, target, after = ConnectorFactory(), ConnectorFactory(), ConnectorFactory()
        owner_of = {"b": before, "t": target, "a": after}
        mine = []
        for n, (i, w) in enumerate(zip(ids, weights, strict=False)):
            owner = owner_of[owners[n]]
            Asset.objects.create(id=i, connector=owner, location=f"/p/{i}", weight=w)
            if owner is target:
                mine.append((i, w))
        with connection.cursor() as cursor:
            by_sums, by_walk = (
                _rows(cursor, "tidemark_plan_assets(%s", target.pk, first, end, budget, cap, many),
                _rows(
                    cursor,
                    "tidemark_plan_batches(%s",
                    assets_source(target.pk).planning_query(),
                    first,
                    end,
                    budget,
                    cap,
                    many,
                ),
            )
        transaction.set_rollback(True)
    expected = expected_ranges(
        [i for i, _ in mine], [w for _, w in mine], budget, cap, start=first, end=end
    )
    assert by_sums == by_walk
    assert by_sums == (expected if many is None else expected[:many])


def _rows(cursor, call: str, *args) -> list[tuple]:
    cursor.execute(
        f"SELECT lower, upper, item_count, weight FROM {call}, %s, %s, %s, %s, %s)", args
    )
    return [tuple(row) for row in cursor.fetchall()]
