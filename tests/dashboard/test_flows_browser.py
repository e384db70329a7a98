"""The dashboard's answers and actions in a real browser (Debian's Chromium through Playwright)
against gunicorn with DEBUG off and a real Celery worker running PySpark. Each page visited is
saved as a screenshot: under var/screenshots/ by default, so a test run leaves the tree as it was;
`make screenshots` saves them under docs/screenshots/ (docs/dashboard.md shows those)."""

import re
from pathlib import Path

import pytest

import tests.support.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import Backfill, Batch, BatchStatus, Watermark
from inventory.services import dispatch, lifecycle
from inventory.services.connectors import connector_create
from inventory.sources import files
from tests.support.browser import _log_in, shoot
from tests.support.factories import ConnectorFactory, make_assets, make_job
from tests.support.worker_fixtures import wait_until, write_orders

pytestmark = pytest.mark.django_db(transaction=True)


def _files_connector(name: str, landing: Path):
    landing.mkdir(parents=True, exist_ok=True)
    return connector_create(name=name, kind="files", config={"path": str(landing)})


def test_an_operator_sees_why_data_is_late_and_acts_on_it(
    browser,
    web_server,
    celery_worker,
    role_users,
    tmp_path,
):
    # a malformed file: its batch dies on the worker (one attempt)
    bad = _files_connector("landing-bad", tmp_path / "bad")
    (tmp_path / "bad" / "broken.parquet").write_bytes(b"this is not parquet" * 10)
    files.directory_discover(connector=bad)
    bad_job = make_job(
        connector=bad,
        name="reads-garbage",
        batch_weight=10**9,
        max_attempts=1,
        sink={"kind": "files", "path": str(tmp_path / "bad-out")},
    )
    # a healthy job with six files, two per batch, all committed by the worker
    good = _files_connector("landing-orders", tmp_path / "good")
    for n in range(6):
        write_orders(tmp_path / "good" / f"orders-{n}.parquet", first_id=n * 10, count=5)
    files.directory_discover(connector=good)
    good_job = make_job(
        connector=good,
        name="orders-copy",
        batch_weight=10**9,
        max_items=2,
        max_concurrency=1,
        sink={"kind": "files", "path": str(tmp_path / "good-out")},
    )
    dispatch.job_run(job=bad_job)
    dispatch.job_run(job=good_job)
    dead = wait_until(
        lambda: Batch.objects.filter(job=bad_job, status=BatchStatus.DEAD).first(),
        timeout=120,
        message="the malformed file's batch to die",
    )
    last = good.assets.order_by("-id").first().id
    wait_until(
        lambda: Watermark.objects.get(job=good_job).value == last,
        timeout=120,
        message="the healthy job to commit everything",
    )

    page = browser.new_page()
    _log_in(page, web_server.url, role_users["operator"], next_path="/")

    # the alert strip names the dead batch, and links to it
    strip = page.locator("#alerts a[data-kind=dead_batches]")
    assert "reads-garbage" in strip.inner_text()
    assert f"waits for batch {dead.pk}" in strip.inner_text()
    shoot(page, "overview")
    strip.click()
    page.wait_for_url(f"{web_server.url}/batches/{dead.pk}/")
    assert page.locator("#error-summary").is_visible()
    assert not page.locator("#error-detail pre").is_visible()  # the detail is folded
    shoot(page, "batch-detail")

    page.goto(f"{web_server.url}/jobs/{good_job.name}/")
    page.wait_for_function("() => Chart.getChart(document.getElementById('history'))")
    assert page.locator(".coverage .seg.succeeded").count() >= 1
    shoot(page, "job-detail")

    # pause and resume a connector in place: the page is not reloaded
    page.goto(f"{web_server.url}/connectors/")
    page.evaluate("window.__notReloaded = true")
    row = page.locator("#connector-landing-orders")
    row.locator("button", has_text="Pause").click()
    page.wait_for_selector("#connector-landing-orders .state-paused")
    shoot(page, "connectors")
    page.locator("#connector-landing-orders button", has_text="Resume").click()
    page.wait_for_selector("#connector-landing-orders .state-active")
    assert page.evaluate("window.__notReloaded") is True
    good.refresh_from_db()
    assert good.state == "active"

    # a backfill: the live preview, then scheduling it, then its progress bar reaches 100 %
    first = good.assets.order_by("id").first().id
    page.goto(f"{web_server.url}/backfills/")
    page.fill("input[name=job]", good_job.name)
    page.fill("input[name=range_start]", str(first))
    page.fill("input[name=range_end]", str(last))
    page.wait_for_selector("#plan-summary")  # no button pressed: the preview follows the form
    summary = page.inner_text("#plan-summary")
    assert "3 batch(es), 6 items" in summary
    assert re.search(r"total weight \d+(\.\d)? kB", summary), summary  # files: bytes as a size
    assert page.locator(".histogram .bin").count() >= 1
    assert not Backfill.objects.exists()
    shoot(page, "backfill-preview")
    page.click("#schedule")
    page.wait_for_url(f"{web_server.url}/backfills/")
    backfill = Backfill.objects.get()
    dispatch.backfills_pace()  # beat's pacing step; the worker sends the next batches itself
    page.wait_for_selector(
        f"#backfill-{backfill.pk} progress.batches[data-pct='100']", timeout=120_000
    )
    assert "3/3" in page.inner_text(f"#backfill-{backfill.pk}")
    shoot(page, "backfills")


def test_the_gap_report_backfills_exactly_the_cancelled_and_dead_ranges(
    browser,
    web_server,
    role_users,
):
    connector = ConnectorFactory(name="gappy-src")
    ids = [a.id for a in make_assets(connector, [10] * 6)]
    job = make_job(connector=connector, name="gappy", batch_weight=10, max_attempts=1)
    done = lifecycle.batch_acquire(job=job, worker="ext")
    lifecycle.batch_succeed(batch_id=done.id, attempt=done.attempt)
    dead = lifecycle.batch_acquire(job=job, worker="ext")
    lifecycle.batch_fail(batch_id=dead.id, attempt=dead.attempt, error={"message": "boom"})
    done = lifecycle.batch_acquire(job=job, worker="ext")
    lifecycle.batch_succeed(batch_id=done.id, attempt=done.attempt)
    cancelled = lifecycle.batch_acquire(job=job, worker="ext")
    lifecycle.batch_cancel(batch_id=cancelled.id, actor="t", reason="wrong input")

    page = browser.new_page()
    _log_in(page, web_server.url, role_users["operator"], next_path=f"/jobs/{job.name}/gaps/")
    states = page.locator("#gaps tbody tr").evaluate_all("rows => rows.map(r => r.dataset.state)")
    assert states == ["dead", "cancelled"]
    page.click("text=Preview")
    page.wait_for_selector("#holes-preview table")
    shoot(page, "gap-report")
    page.click("#backfill-holes")
    page.wait_for_url(f"{web_server.url}/backfills/")
    spans = sorted((b.span.lower, b.span.upper - 1) for b in Batch.objects.filter(kind="backfill"))
    assert spans == [(ids[1], ids[1]), (ids[3], ids[3])]


def test_a_viewer_sees_no_action_and_a_forged_post_is_refused(
    browser,
    web_server,
    role_users,
):
    connector = ConnectorFactory(name="viewed-src")
    make_assets(connector, [10] * 3)
    job = make_job(connector=connector, name="viewed", batch_weight=10, max_attempts=1)
    dead = lifecycle.batch_acquire(job=job, worker="ext")
    lifecycle.batch_fail(batch_id=dead.id, attempt=dead.attempt, error={"message": "boom"})
    Backfill.objects.all().delete()

    page = browser.new_page()
    _log_in(page, web_server.url, role_users["viewer"], next_path="/")
    for path in (
        "/",
        f"/jobs/{job.name}/",
        f"/jobs/{job.name}/gaps/",
        "/connectors/",
        "/backfills/",
        f"/batches/{dead.pk}/",
    ):
        page.goto(f"{web_server.url}{path}")
        # the only form a viewer gets is the logout button (and the batch filters, a GET)
        posts = page.locator("main form[method=post]").count()
        assert posts == 0, path
        assert page.locator("main button", has_text="Pause").count() == 0, path
    # a forged POST with a valid CSRF token: the server refuses the role, not only the UI
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for path in (
        f"/connectors/{connector.name}/pause/",
        f"/jobs/{job.name}/gaps/backfill/",
        f"/batches/{dead.pk}/retry/",
    ):
        response = page.request.post(
            f"{web_server.url}{path}",
            headers={"X-CSRFToken": token, "Referer": f"{web_server.url}/"},
        )
        assert response.status == 403, path
    connector.refresh_from_db()
    assert connector.state == "active"
    assert not Backfill.objects.exists()
    assert Batch.objects.get(pk=dead.pk).status == BatchStatus.DEAD
