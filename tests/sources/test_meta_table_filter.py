"""An external PostgreSQL meta table (uid/item/weight) with a structured filter as the item source.

Planning must see only the rows the filter matches; filter values are data, never SQL; unknown
operators, columns and tables, and negative weights, are refused naming the field.
"""

import pytest
from django.db import connection

from inventory.models import Batch, Connector, ConnectorKind
from inventory.services import lifecycle
from inventory.services.backfills import backfill_preview
from inventory.services.connectors import connector_create
from inventory.services.errors import InvalidInput
from inventory.services.planning import plan_closed_range
from inventory.sources.items import meta_table_source
from tests.support.factories import make_job

INJECTION = "x'; drop table meta_events; --"


@pytest.fixture
def meta_table(db):
    """uid 1..40; kind a/b alternating, weight uid % 7; one row whose kind looks like SQL."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE TABLE meta_events (
                uid bigint PRIMARY KEY, item text NOT NULL, weight bigint, kind text, region text
            );
            INSERT INTO meta_events (uid, item, weight, kind, region)
            SELECT g, 's3://bucket/part-' || g, g % 7,
                   CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END,
                   CASE WHEN g % 3 = 0 THEN NULL ELSE 'eu' END
            FROM generate_series(1, 40) AS g;
            -- Tidemark reads local meta tables as tidemark_reader (docs/security.md)
            GRANT SELECT ON meta_events TO tidemark_reader;
            """
        )
        cursor.execute("UPDATE meta_events SET kind = %s WHERE uid = 40", [INJECTION])
    return "meta_events"


def _spec(filters, **overrides):
    return {"table": "meta_events", "filters": filters, **overrides}


def _connector(name, filters, **overrides):
    return connector_create(
        name=name,
        kind=ConnectorKind.FILES,
        config={"meta_table": _spec(filters, **overrides)},
    )


def _matching(where, params=()):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT uid, weight FROM meta_events WHERE {where} ORDER BY uid", params)
        return cursor.fetchall()


def _drain(job):
    taken = []
    while (batch := lifecycle.batch_acquire(job=job, worker="w")) is not None:
        taken.append(batch)
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    return taken


def test_planning_sees_only_the_rows_the_filter_matches(meta_table):
    connector = _connector("meta-a", [{"column": "kind", "op": "eq", "value": "a"}])
    job = make_job(connector=connector, batch_weight=10, max_items=4)
    taken = _drain(job)

    rows = _matching("kind = 'a'")
    assert sum(b.item_count for b in taken) == len(rows)
    assert sum(b.weight for b in taken) == sum(w for _, w in rows)
    for batch in taken:
        inside = [(uid, w) for uid, w in rows if batch.span.lower <= uid < batch.span.upper]
        assert (batch.item_count, batch.weight) == (len(inside), sum(w for _, w in inside))
        assert batch.weight <= 10 or batch.item_count == 1
    assert [b.span.lower for b in taken[1:]] == [b.span.upper for b in taken[:-1]]
    assert taken[-1].span.upper == rows[-1][0] + 1


def test_filters_combine_and_cover_every_operator_family(meta_table):
    source = meta_table_source(
        _spec(
            [
                {"column": "kind", "op": "in", "value": ["a", "b"]},
                {"column": "region", "op": "not_null"},
                {"column": "uid", "op": "ge", "value": 10},
                {"column": "weight", "op": "ne", "value": 0},
            ]
        )
    )
    plan = plan_closed_range(source=source, first=0, last=100, budget=1000, max_items=1000)
    expected = _matching("kind IN ('a', 'b') AND region IS NOT NULL AND uid >= 10 AND weight <> 0")
    assert [(p.item_count, p.weight) for p in plan] == [
        (len(expected), sum(w for _, w in expected))
    ]


def test_a_filter_value_containing_sql_is_treated_as_data(meta_table):
    source = meta_table_source(_spec([{"column": "kind", "op": "eq", "value": INJECTION}]))
    plan = plan_closed_range(source=source, first=0, last=100, budget=1000, max_items=1000)
    assert [(p.item_count, p.weight) for p in plan] == [(1, 40 % 7)]

    listed = meta_table_source(_spec([{"column": "kind", "op": "in", "value": ["zzz", INJECTION]}]))
    plan = plan_closed_range(source=listed, first=0, last=100, budget=1000, max_items=1000)
    assert sum(p.item_count for p in plan) == 1

    connector = _connector("meta-inject", [{"column": "kind", "op": "ne", "value": INJECTION}])
    job = make_job(connector=connector, batch_weight=1000, max_items=1000)
    assert lifecycle.batch_acquire(job=job, worker="w").item_count == 39
    assert _matching("true")[-1][0] == 40  # the table is still there


def test_a_missing_weight_column_means_every_item_weighs_one(meta_table):
    source = meta_table_source(_spec([], weight_column=None))
    plan = plan_closed_range(source=source, first=1, last=10, budget=4, max_items=100)
    assert [(p.lower, p.upper, p.item_count, p.weight) for p in plan] == [
        (1, 5, 4, 4),
        (5, 9, 4, 4),
        (9, 11, 2, 2),
    ]


@pytest.mark.parametrize(
    ("flt", "field"),
    [
        ({"column": "kind", "op": "like", "value": "a%"}, "config.meta_table.filters[0].op"),
        ({"column": "kind", "op": "eq"}, "config.meta_table.filters[0].value"),
        ({"column": "kind; drop", "op": "eq", "value": 1}, "config.meta_table.filters[0].column"),
        ({"column": "kind", "op": "in", "value": "a"}, "config.meta_table.filters[0].value"),
        ("kind = 'a'", "config.meta_table.filters[0]"),
    ],
)
def test_a_malformed_filter_is_refused_naming_the_field(meta_table, flt, field):
    with pytest.raises(InvalidInput) as refused:
        _connector("bad-filter", [flt])
    assert refused.value.field == field
    assert not Connector.objects.filter(name="bad-filter").exists()


def test_an_unknown_operator_lists_the_known_ones(meta_table):
    with pytest.raises(InvalidInput) as refused:
        _connector("bad-op", [{"column": "kind", "op": "contains", "value": "a"}])
    assert "'contains'" in refused.value.message
    assert "eq" in refused.value.message


def test_an_unknown_filter_column_or_table_is_refused_when_the_connector_is_created(meta_table):
    with pytest.raises(InvalidInput) as refused:
        _connector("bad-column", [{"column": "colour", "op": "eq", "value": "red"}])
    assert refused.value.field == "config.meta_table"
    assert "colour" in refused.value.message

    with pytest.raises(InvalidInput) as missing:
        connector_create(
            name="bad-table",
            kind=ConnectorKind.FILES,
            config={"meta_table": {"table": "no_such_meta"}},
        )
    assert missing.value.field == "config.meta_table"
    assert "no_such_meta" in missing.value.message

    with pytest.raises(InvalidInput) as bad_name:
        connector_create(
            name="bad-table-name",
            kind=ConnectorKind.FILES,
            config={"meta_table": {"table": "meta_events; drop table x"}},
        )
    assert bad_name.value.field == "config.meta_table.table"
    assert not Connector.objects.filter(name__startswith="bad-").exists()


@pytest.mark.parametrize("bad_weight", ["-5", "NULL"])
def test_a_negative_or_missing_weight_in_the_meta_table_fails_planning_and_writes_nothing(
    meta_table, bad_weight
):
    connector = _connector("meta-neg", [])
    job = make_job(connector=connector, batch_weight=100, max_items=3)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE meta_events SET weight = {bad_weight} WHERE uid = 2")

    with pytest.raises(InvalidInput) as refused:
        lifecycle.batch_acquire(job=job, worker="w")
    assert refused.value.field == "weight"
    assert "item 2" in refused.value.message
    assert not Batch.objects.filter(job=job).exists()

    with pytest.raises(InvalidInput) as preview:
        backfill_preview(job=job, range_start=1, range_end=40)
    assert preview.value.field == "weight"

    # once the row is corrected, planning goes on from where it stood
    with connection.cursor() as cursor:
        cursor.execute("UPDATE meta_events SET weight = 2 WHERE uid = 2")
    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert (batch.span.lower, batch.span.upper, batch.item_count) == (0, 4, 3)


def test_a_meta_table_column_dropped_after_creation_is_a_clear_error_at_planning(meta_table):
    connector = _connector("meta-drift", [{"column": "region", "op": "eq", "value": "eu"}])
    job = make_job(connector=connector, batch_weight=100, max_items=3)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE meta_events DROP COLUMN region")

    with pytest.raises(InvalidInput) as refused:
        lifecycle.batch_acquire(job=job, worker="w")
    assert refused.value.field == "config.meta_table"
    assert "region" in refused.value.message
    with pytest.raises(InvalidInput) as preview:
        backfill_preview(job=job, range_start=1, range_end=40)
    assert preview.value.field == "config.meta_table"
    assert not Batch.objects.filter(job=job).exists()


def test_a_bad_weight_right_after_a_full_batch_does_not_block_that_batch(meta_table):
    connector = _connector("meta-next-bad", [])
    job = make_job(connector=connector, batch_weight=100, max_items=3)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE meta_events SET weight = -1 WHERE uid = 4")

    first = lifecycle.batch_acquire(job=job, worker="w")  # uids 1..3 fill the item cap
    assert (first.span.lower, first.span.upper, first.item_count) == (0, 4, 3)
    with pytest.raises(InvalidInput) as refused:
        lifecycle.batch_acquire(job=job, worker="w")
    assert refused.value.field == "weight" and "item 4" in refused.value.message


def test_a_meta_table_with_a_duplicate_uid_is_refused_naming_the_uid(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE meta_dups (uid bigint, item text, weight bigint);"
            "INSERT INTO meta_dups VALUES (1, 'a', 1), (2, 'b', 1), (2, 'c', 1), (3, 'd', 1);"
            "GRANT SELECT ON meta_dups TO tidemark_reader"
        )
    with pytest.raises(InvalidInput) as refused:
        connector_create(
            name="meta-dups",
            kind=ConnectorKind.FILES,
            config={"meta_table": {"table": "meta_dups"}},
        )
    assert refused.value.field == "config.meta_table.uid_column"
    assert "uid 2 appears more than once" in refused.value.message
    assert not Connector.objects.filter(name="meta-dups").exists()


def test_a_uid_duplicated_after_creation_stops_every_planner_naming_it(meta_table):
    connector = _connector("meta-later-dup", [])
    job = make_job(connector=connector, batch_weight=1000, max_items=2)
    first = lifecycle.batch_acquire(job=job, worker="w")  # uids 1 and 2
    lifecycle.batch_succeed(batch_id=first.id, attempt=first.attempt)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE meta_events DROP CONSTRAINT meta_events_pkey")
        cursor.execute(
            "INSERT INTO meta_events (uid, item, weight, kind) VALUES (3, 'again', 1, 'b')"
        )

    with pytest.raises(InvalidInput) as acquire:
        lifecycle.batch_acquire(job=job, worker="w")
    assert acquire.value.field == "config.meta_table"
    assert "uid 3 appears more than once" in acquire.value.message
    with pytest.raises(InvalidInput) as preview:
        backfill_preview(job=job, range_start=3, range_end=4)
    assert "uid 3" in preview.value.message
    # no batch was planned over the duplicate; the committed one stays
    assert list(Batch.objects.filter(job=job).values_list("id", flat=True)) == [first.id]


@pytest.mark.parametrize(
    ("config", "field", "known"),
    [
        # `filter` for `filters`: without the check every row would be planned, not the filtered ones
        (
            {
                "meta_table": {
                    "table": "meta_events",
                    "filter": [{"column": "kind", "op": "eq", "value": "a"}],
                }
            },
            "config.meta_table.filter",
            "filters",
        ),
        (
            {"meta_table": _spec([{"column": "kind", "op": "eq", "vaule": "a"}])},
            "config.meta_table.filters[0].vaule",
            "value",
        ),
        ({"meta_table": _spec([]), "patern": "*.parquet"}, "config.patern", "read_options"),
        ({"meta_table": _spec([]), "dsn": "postgresql://x"}, "config.dsn", "meta_table"),
    ],
)
def test_a_key_nothing_reads_is_refused_naming_it(meta_table, config, field, known):
    with pytest.raises(InvalidInput) as refused:
        connector_create(name="typo", kind=ConnectorKind.FILES, config=config)
    assert refused.value.field == field
    assert known in refused.value.message
    assert not Connector.objects.filter(name="typo").exists()


def test_every_key_a_local_meta_table_reads_is_accepted(meta_table, tmp_path):
    config = {
        "meta_table": _spec(
            [{"column": "kind", "op": "eq", "value": "a"}],
            uid_column="uid",
            item_column="item",
            weight_column="weight",
            visibility="none",
        ),
        "path": str(tmp_path),
        "format": "parquet",
        "read_options": {},
        "schema": None,
        "lineage": False,
        "watermark_column": None,
        "snapshot": False,
    }
    created = connector_create(name="all-keys", kind=ConnectorKind.FILES, config=config)
    assert created.config["meta_table"]["visibility"] == "none"
