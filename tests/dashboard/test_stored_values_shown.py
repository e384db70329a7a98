"""Watermark values read by raw SQL (the overview, /metrics) are shown as the job page shows them:
decoded, never as the JSON text the database hands over (inventory.sql.json_value)."""

import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from inventory.models import ConnectorKind, Watermark, WatermarkType
from inventory.sql import json_value
from tests.support.factories import ConnectorFactory, make_job

pytestmark = pytest.mark.django_db

TWO_HOURS_AGO = (timezone.now() - timedelta(hours=2)).replace(microsecond=0)


def _jobs():
    """An int, a datetime and a Kafka (key_value) job, each with a committed watermark value."""
    ints = make_job(name="ids-job")
    times = make_job(name="times-job", watermark_type=WatermarkType.DATETIME)
    topic = ConnectorFactory(
        name="clicks-topic",
        kind=ConnectorKind.KAFKA,
        config={"bootstrap_servers": "127.0.0.1:9092", "topic": "clicks"},
    )
    kafka = make_job(name="kafka-job", connector=topic, watermark_type=WatermarkType.KEY_VALUE)
    Watermark.objects.filter(job=ints).update(position=42, value=41)
    Watermark.objects.filter(job=times).update(position=3, value=TWO_HOURS_AGO.isoformat())
    Watermark.objects.filter(job=kafka).update(position=2, value={"0": 23, "1": 17})
    cache.clear()
    return ints, times, kafka


def _row(html: str, job: str) -> str:
    # up to the next job's row (a key_value watermark's cell holds a table of its own)
    found = re.search(rf'data-job="{job}">(.*?)(?:data-job=|</tbody>)', html, re.S)
    assert found, f"no overview row for {job}"
    return found.group(1)


def test_json_value_decodes_text_and_keeps_decoded_values():
    assert json_value('"2026-03-04T23:57:36+00:00"') == "2026-03-04T23:57:36+00:00"
    assert json_value('{"0": 23}') == {"0": 23}
    assert json_value("41") == 41
    assert json_value({"0": 23}) == {"0": 23}
    assert json_value(None) is None


def test_the_overview_shows_each_watermark_type_as_the_job_page_does(client, role_users):
    _jobs()
    client.force_login(role_users["viewer"])
    html = client.get("/").content.decode()

    times = _row(html, "times-job")
    assert TWO_HOURS_AGO.isoformat() in times
    assert "&quot;" not in times and '"2' not in times  # not the JSON text, quotes and all
    assert re.search(r"2 h[^<]* behind", times), times  # the time lag

    kafka = _row(html, "kafka-job")
    assert "2 key(s)" in kafka
    assert "<td>0</td><td>23</td>" in kafka and "<td>1</td><td>17</td>" in kafka
    assert "{&quot;0&quot;" not in kafka

    ints = _row(html, "ids-job")
    assert re.search(r"<td>41</td>", ints), ints

    page = client.get("/jobs/times-job/").content.decode()
    assert TWO_HOURS_AGO.isoformat() in page


def _samples(client) -> dict:
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    return {
        (sample.name, sample.labels.get("job")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@override_settings(METRICS_TOKEN="scrape-me")
def test_tidemark_lag_seconds_has_a_sample_for_every_datetime_job(client, settings):
    _jobs()
    before = (timezone.now() - TWO_HOURS_AGO).total_seconds()
    samples = _samples(client)
    after = (timezone.now() - TWO_HOURS_AGO).total_seconds()
    # how far that source time is behind now, as the scrape saw it (the module's clock reading
    # may be minutes older than the test on a busy run)
    lag = samples[("tidemark_lag_seconds", "times-job")]
    assert before - 2 <= lag <= after + 2
    # only datetime watermarks have a source time to be behind
    assert ("tidemark_lag_seconds", "ids-job") not in samples
    assert ("tidemark_lag_seconds", "kafka-job") not in samples
    # the positions are a per-job family of the full setting: decoded there too
    settings.METRICS_PER_JOB = "full"
    samples = _samples(client)
    assert samples[("tidemark_watermark_position", "kafka-job")] == 2
    assert samples[("tidemark_watermark_position", "ids-job")] == 42
