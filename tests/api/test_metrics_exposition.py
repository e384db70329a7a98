"""inventory/api/exposition.py writes what prometheus_client.generate_latest writes for the same
families, byte for byte, and Prometheus's parser reads it back."""

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inventory.api.exposition import (
    Family,
    label_value,
    number,
    render,
    rewritten_by_prometheus_client,
    written_by_prometheus_client,
)

TRICKY = ["plain", 'say "hi"', "back\\slash", "two\nlines", "ünïcødé ✓", "", "a,b}={c"]


def tricky_families() -> list[Family]:
    jobs = Family("tm_lag_items", "Items behind\\the watermark\nsecond line", labels=["job"])
    for n, name in enumerate(TRICKY):
        jobs.add([name], n)
    values = Family("tm_values", "odd numbers", labels=["job"])
    for name, value in zip(
        TRICKY,
        [0, -3, 12345678, 1.5e-9, 2**53 + 1, math.inf, -math.inf],
        strict=True,
    ):
        values.add([name], value)
    # label names given out of order: written sorted, as generate_latest does
    alerts = Family("tm_alert", "alerts", labels=["kind", "subject", "severity"])
    alerts.add(["dead_batches", 'job "x"', "critical"], 1)
    alerts.add(["watermark_late", "job\\y", "warning"], 1)
    started = Family("tm_started", "attempts", labels=["job", "outcome"], type="counter")
    started.add(["a", "succeeded"], 7)
    started.add(["b\nc", "failed"], 2.25)
    empty = Family("tm_empty", "no samples", labels=["job"])
    counts = Family("tm_counts", "integers either side of the exponent form", labels=["n"])
    for value in [0, 1, 999_999, 1_000_000, 1_234_567, 10**17, -1, -1_000_000, True, 3.0]:
        counts.add([str(value)], value)
    bare = Family("tm_reaper_overdue", "no labels")
    bare.add([], 1)
    # four labels (the writer's general case), values with the template's own `%`
    four = Family("tm_four", "four labels", labels=["d", "c", "b", "a"])
    four.add(["100%", "%s", "%%", 'q"%d'], 4)
    four.add(TRICKY[:4], 0.5)
    return [jobs, values, alerts, started, empty, counts, bare, four]


def test_the_text_is_byte_for_byte_what_prometheus_client_writes():
    families = tricky_families()
    assert render(families) == written_by_prometheus_client(families)


def test_prometheus_reads_back_every_label_value_and_number():
    text = render(tricky_families()).decode()
    parsed = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    for n, name in enumerate(TRICKY):
        assert parsed[("tm_lag_items", (("job", name),))] == n
    assert parsed[("tm_values", (("job", 'say "hi"'),))] == -3
    assert parsed[("tm_values", (("job", "two\nlines"),))] == 1.5e-9
    assert parsed[("tm_values", (("job", "a,b}={c"),))] == -math.inf
    alert = (("kind", "dead_batches"), ("severity", "critical"), ("subject", 'job "x"'))
    assert parsed[("tm_alert", alert)] == 1
    assert parsed[("tm_started_total", (("job", "b\nc"), ("outcome", "failed")))] == 2.25
    assert parsed[("tm_reaper_overdue", ())] == 1


def test_a_family_given_as_lines_is_written_as_its_samples_would_be():
    """Family.lines, each label value through label_value and each number through number, are
    the bytes of the same samples given as Family.samples; and Prometheus's parser read back and
    written again by generate_latest gives the same body (the check /metrics is held to)."""
    values = [0, 7, 1_234_567, 1.5e-9, 1765000000.123456, 2**53 + 1]
    as_samples = Family("tm_lag", "lag", labels=["job"])
    as_lines = Family("tm_lag", "lag", labels=["job"])
    pairs = Family("tm_stuck", "stuck", labels=["status", "job"])
    pairs_lines = Family("tm_stuck", "stuck", labels=["status", "job"])
    for name, value in zip(TRICKY, values, strict=False):
        as_samples.add([name], value)
        as_lines.lines.append(f'tm_lag{{job="{label_value(name)}"}} {number(value)}\n')
        pairs.add(["dead", name], value)
        pairs_lines.lines.append(
            f'tm_stuck{{job="{label_value(name)}",status="dead"}} {number(value)}\n'
        )
    body = render([as_lines, pairs_lines])
    assert body == render([as_samples, pairs])
    assert rewritten_by_prometheus_client(body) == body
    assert rewritten_by_prometheus_client(render(tricky_families())) == render(tricky_families())


def test_the_read_back_check_finds_a_line_prometheus_client_would_write_otherwise():
    """A number written `1` (generate_latest writes `1.0`) or labels out of name order are told
    apart: the check can fail."""
    unsorted = Family("tm_x", "x", labels=["job", "status"])
    unsorted.lines.append('tm_x{status="dead",job="a"} 1.0\n')
    bare = Family("tm_y", "y", labels=["job"])
    bare.lines.append('tm_y{job="a"} 1\n')
    for family in (unsorted, bare):
        body = render([family])
        assert rewritten_by_prometheus_client(body) != body


@pytest.mark.parametrize(
    "args, message",
    [
        (("tm-lag", "x"), "not a Prometheus metric name: 'tm-lag'"),
        (("tm_lag", "x", ["job name"]), "not a Prometheus label name: 'job name'"),
        (("tm_lag", "x", ["__job"]), "not a Prometheus label name: '__job'"),
    ],
)
def test_a_family_refuses_names_prometheus_cannot_read(args, message):
    with pytest.raises(ValueError) as error:
        Family(*args)
    assert str(error.value) == message


def test_a_family_is_a_counter_or_a_gauge():
    with pytest.raises(ValueError, match="type must be one of counter, gauge, not 'summary'"):
        Family("tm_x", "x", type="summary")
