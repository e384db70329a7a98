"""A backfill by time range in a real browser (Debian's Chromium through Playwright) against
gunicorn, run by a real Celery worker reading a table of another PostgreSQL database."""

import os
from datetime import timedelta

import pytest

from inventory.models import Backfill
from inventory.services import dispatch
from inventory.services.discovery import discover
from inventory.services.jobs import job_create
from tests.support.browser import _log_in
from tests.support.table_source import SOURCE_ENV, T0, insert, table_connector
from tests.support.worker_fixtures import WorkerProcess, read_sink

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def table_worker(source_dsn, private_queue, worker_env, worker_log_dir):
    """A worker of this test's own queue that can reach the source table (its DSN variable)."""
    worker = WorkerProcess(
        env={**worker_env, "CELERY_QUEUE": private_queue, SOURCE_ENV: source_dsn},
        queue=private_queue,
        name="by-time",
        log_dir=worker_log_dir,
    )
    yield worker.start()
    worker.stop()


def test_an_operator_previews_and_schedules_a_backfill_by_time_and_it_completes(
    browser,
    web_server,
    table_worker,
    role_users,
    tmp_path,
):
    insert(os.environ[SOURCE_ENV], range(1, 41))  # updated_at = T0 + id seconds
    connector = table_connector(name="orders-db-ui", column="updated_at", slice_rows=10)
    job = job_create(
        name="orders-by-time-ui",
        connector=connector,
        batch_weight=10,
        max_items=1,
        watermark_type="datetime",
        sink={"kind": "files", "path": str(tmp_path / "sink")},
    )
    discover(connector)
    slices = list(connector.assets.order_by("id").values_list("id", flat=True))
    assert len(slices) == 4  # rows 1-10, 11-20, 21-30, 31-40

    page = browser.new_page()
    _log_in(page, web_server.url, role_users["operator"], next_path="/backfills/")
    assert page.is_disabled("#by-time")  # no job named yet: no times offered
    page.fill("input[name=job]", job.name)
    page.wait_for_selector("#time-basis[data-supported='1']")
    assert "column updated_at" in page.inner_text("#time-basis")
    page.check("#by-time")
    assert page.is_hidden("input[name=range_start]")
    start, end = T0 + timedelta(seconds=15), T0 + timedelta(seconds=25)
    page.fill("input[name=time_start]", start.isoformat())
    page.fill("input[name=time_end]", end.isoformat())
    page.fill("input[name=priority]", "1")  # ahead of the job's incremental work
    page.wait_for_selector("#resolved-range")  # the live preview followed the form
    page.wait_for_function(
        "() => document.querySelector('#plan-summary')?.innerText.includes('2 batch(es)')"
    )
    resolved = page.inner_text("#resolved-range")
    assert f"Items {slices[1]}–{slices[2]}" in resolved, resolved
    assert "column updated_at" in resolved and start.isoformat() in resolved
    assert "2 batch(es), 2 items, total weight 20" in page.inner_text("#plan-summary")
    assert not Backfill.objects.exists()

    page.click("#schedule")
    page.wait_for_url(f"{web_server.url}/backfills/")
    backfill = Backfill.objects.get()
    assert (backfill.range_start, backfill.range_end) == (slices[1], slices[2])
    assert backfill.requested == {
        "by": "time",
        "basis": "column updated_at",
        "start": start.isoformat(),
        "end": end.isoformat(),
    }
    row = f"#backfill-{backfill.pk}"
    assert "column updated_at" in page.inner_text(row)  # the list shows the time range

    dispatch.backfills_pace()  # beat's pacing step, to this test's worker
    page.wait_for_selector(f"{row} progress.batches[data-pct='100']", timeout=180_000)
    assert "2/2" in page.inner_text(row)
    # the worker read exactly the two slices from the source table, one batch each
    done = [
        (b.span.lower, b.span.upper - 1, b.status, b.result.get("rows_out"))
        for b in backfill.batches.order_by("span")
    ]
    assert done == [(pk, pk, "succeeded", 10) for pk in slices[1:3]], done
    # and a reader of the sink sees those rows once (the job's incremental work, which goes on
    # meanwhile, replaces an output it covers again in the same step as it publishes its own)
    rows = [r["id"] for r in read_sink(tmp_path / "sink") if 11 <= r["id"] <= 30]
    assert sorted(rows) == list(range(11, 31))
