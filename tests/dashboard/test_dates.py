"""One date format on every page: the server's local time to the second with the time zone, and
how long ago beside it ("2026-12-06 04:12:33 UTC · 3 min ago"); batch pages showed minutes."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from inventory.services import lifecycle
from inventory.templatetags.human import when
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db

MOMENT = r"<time datetime=\"[^\"]+\">\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC</time>"
AGO = r' <span class="muted ago">· (now|\d+(\.\d)? s ago|\d+ min( \d+ s)? ago)</span>'


def test_batch_job_and_connector_pages_show_times_to_the_second_with_how_long_ago(role_users):
    job = make_job(connector=ConnectorFactory(name="landing"), name="dated")
    make_assets(job.connector, [1, 1])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    client = Client()
    client.force_login(role_users["viewer"])

    page = client.get(f"/batches/{batch.id}/").content.decode()
    timings = re.search(r"<dt>timings</dt><dd>(.*?)</dd>", page, re.S).group(1)
    for step in ("created", "started", "finished"):
        assert re.search(rf"{step} {MOMENT}{AGO}", timings), timings
    assert not re.search(r"\b[ap]\.m\.", page)  # Django's default format, to the minute
    attempts = re.search(r'<table class="grid small" id="attempts">(.*?)</table>', page, re.S)
    assert len(re.findall(MOMENT, attempts.group(1))) == 2

    for url in ("/jobs/dated/", "/jobs/dated/batches/"):
        html = client.get(url).content.decode()
        assert re.search(MOMENT + AGO, html), url
        assert not re.search(r"\b[ap]\.m\.", html)
    connectors = client.get("/connectors/").content.decode()
    assert not re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}</", connectors)  # no minutes-only time


def test_when_says_how_long_ago_or_how_soon():
    now = timezone.now().replace(microsecond=0)
    past = str(when(now - timedelta(minutes=3, seconds=2)))
    assert re.fullmatch(MOMENT + r' <span class="muted ago">· 3 min( [23] s)? ago</span>', past)
    soon = str(when(now + timedelta(hours=2, seconds=30)))
    assert "· in 2 h" in soon
    assert when(None) == "—" and when(None, "") == ""
