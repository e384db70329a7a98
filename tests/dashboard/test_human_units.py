"""The dashboard's human units: durations, sizes and counts (inventory/templatetags/human.py)."""

from datetime import timedelta

import pytest
from django.template import Context, Template

from inventory.templatetags.human import count, duration, metric, size


@pytest.mark.parametrize(
    "value, shown",
    [
        (timedelta(days=265, hours=12, minutes=17, seconds=38.275097), "265 d 12 h"),
        (timedelta(days=3, hours=4, minutes=59), "3 d 4 h"),
        (timedelta(hours=2), "2 h"),
        (timedelta(minutes=12, seconds=5), "12 min 5 s"),
        (timedelta(seconds=42), "42 s"),
        (timedelta(seconds=0.4), "0.4 s"),
        (0, "0 s"),
        (3600, "1 h"),
        (3661, "1 h 1 min"),
        (None, "—"),
    ],
)
def test_a_duration_shows_its_two_largest_units(value, shown):
    assert duration(value) == shown


@pytest.mark.parametrize(
    "value, shown",
    [(0, "0 B"), (512, "512 B"), (1_234, "1.2 kB"), (1_200_000_000, "1.2 GB"), (345e6, "345 MB")],
)
def test_a_size_is_in_decimal_units(value, shown):
    assert size(value) == shown


def test_a_count_has_separators_and_a_noun_in_the_right_number():
    assert count(12345) == "12,345"
    assert count(12345, "item") == "12,345 items"
    assert count(1, "item") == "1 item"
    assert count(2, "batch") == "2 batches"


def test_a_result_metric_is_shown_in_its_unit():
    assert metric(1_500_000, "bytes") == "1.5 MB"
    assert metric(75.2, "seconds") == "1 min 15 s"
    assert metric(12000, "rows_out") == "12,000"
    assert metric("s3://b/p", "location") == "s3://b/p"


def test_a_result_id_is_shown_as_its_exact_digits_and_a_large_count_exactly():
    """An Iceberg sink's snapshot id (19 digits) was shown as a count through a float:
    "8,701,054,122,690,156,544" for 8701054122690156263, neither readable nor right."""
    snapshot = 8701054122690156263
    assert metric(snapshot, "iceberg_snapshot") == "8701054122690156263"
    assert metric(12, "delta_version") == "12"
    assert metric(7, "sink.batch_id") == "7"
    assert count(snapshot) == "8,701,054,122,690,156,263"


@pytest.mark.django_db
def test_the_batch_page_shows_an_iceberg_sinks_snapshot_id_as_it_is(client, world, role_users):
    from inventory.models import Batch

    snapshot = 8701054122690156263
    result = {"rows_out": 12000, "iceberg_table": "out.t", "iceberg_snapshot": snapshot}
    Batch.objects.filter(pk=world["dead"].pk).update(result=result)
    client.force_login(role_users["viewer"])
    page = client.get(f"/batches/{world['dead'].pk}/").content.decode()
    assert "<td>8701054122690156263</td>" in page
    assert "<td>12,000</td>" in page


def test_the_filters_work_in_a_template():
    html = Template(
        '{% load human %}{{ lag|duration }} behind · {{ b|size }} · {{ n|count:"item" }}'
    ).render(Context({"lag": timedelta(days=3, hours=4), "b": 1_200_000_000, "n": 12345}))
    assert html == "3 d 4 h behind · 1.2 GB · 12,345 items"


def test_a_large_number_is_compact_for_axis_labels():
    from inventory.templatetags.human import compact

    assert [compact(v) for v in (950, 12_000, 1_200_000, 100_000_000, 3e9)] == [
        "950",
        "12k",
        "1.2M",
        "100M",
        "3G",
    ]


@pytest.mark.parametrize(
    "kind, config, unit",
    [
        ("files", {"path": "/data/landing"}, "bytes"),
        ("files", {"path": "s3://bucket/prefix"}, "bytes"),
        ("delta", {"path": "/data/table"}, "bytes"),
        ("job_output", {"job": "upstream"}, "bytes"),
        ("table", {"dsn_env": "SRC", "table": "t", "column": "id"}, "rows"),
        ("kafka", {"bootstrap_servers": "h:9092", "topic": "t"}, "messages"),
        # a meta table's weight column means what its writer chose: a plain number
        ("files", {"meta_table": "m", "weight_column": "w"}, ""),
        ("table", {"table": "m", "uid_column": "u"}, ""),
    ],
)
def test_a_connectors_weight_unit_follows_its_kind(kind, config, unit):
    from inventory.models import Connector, weight_unit

    assert weight_unit(kind, config) == unit
    assert Connector(kind=kind, config=config).weight_unit == unit


def test_a_weight_is_shown_in_its_unit():
    from inventory.templatetags.human import weight

    assert weight(1_200_000_000, "bytes") == "1.2 GB"
    assert weight(196_608, "bytes") == "197 kB"
    assert weight(12345, "rows") == "12,345 rows"
    assert weight(1, "messages") == "1 message"
    assert weight(12345, "") == "12,345"
    html = Template("{% load human %}{{ w|weight:unit }}").render(
        Context({"w": 3_500_000, "unit": "bytes"})
    )
    assert html == "3.5 MB"


def test_the_command_line_shows_a_weight_in_its_unit(capsys):
    from tidemark_cli.output import weight
    from tidemark_cli.resources import _print_plan, _progress_line

    assert weight(1_200_000_000, "bytes") == "1.2 GB"
    assert weight(12345, "messages") == "12,345 messages"
    assert weight(7, None) == "7"
    _print_plan(
        {
            "job": "j",
            "range_start": 1,
            "range_end": 4,
            "requested": None,
            "batch_count": 2,
            "total_items": 4,
            "total_weight": 2_400_000,
            "weight_unit": "bytes",
            "batches": [
                {"range_start": 1, "range_end": 2, "item_count": 2, "weight": 1_200_000},
                {"range_start": 3, "range_end": 4, "item_count": 2, "weight": 1_200_000},
            ],
        }
    )
    shown = capsys.readouterr().out
    assert "2 batch(es), 4 item(s), weight 2.4 MB" in shown
    assert shown.count("1.2 MB") == 2
    state = {
        "job": "k",
        "watermark_position": 5,
        "lag": {"items": 3, "weight": 30},
        "weight_unit": "rows",
        "batch_counts": {},
        "paused": False,
        "blocked_by": None,
    }
    assert "lag 3 items (30 rows)" in _progress_line(state)
