"""The dashboard in a real browser: Debian's Chromium driven by Playwright against a live server."""

import shutil

import pytest

from inventory.services import batches
from tests.factories import ConnectorFactory, make_assets, make_job

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still plain synchronous code
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    assert shutil.which(CHROMIUM), "Debian's chromium is required (.ci/run installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


def test_an_operator_logs_in_reads_a_job_and_previews_a_backfill(
    browser, live_server, role_users, settings
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast in tests
    operator = role_users["operator"]
    operator.set_password("pw-for-tests-only")
    operator.save(update_fields=["password"])
    connector = ConnectorFactory(name="orders")
    assets = make_assets(connector, [30] * 6)
    job = make_job(connector=connector, name="orders-hourly", batch_weight=60, max_items=5)
    for _ in range(2):
        batch = batches.batch_acquire(job=job, worker="w")
        batches.batch_succeed(batch_id=batch.id, attempt=batch.attempt)

    page = browser.new_page()
    page.goto(f"{live_server.url}/jobs/orders-hourly/")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "operator-user")
    page.fill("input[name=password]", "pw-for-tests-only")
    page.click("[type=submit]")
    page.wait_for_url(f"{live_server.url}/jobs/orders-hourly/")

    assert page.inner_text("dl.facts").count(str(assets[3].id)) >= 1  # the committed watermark
    # Chart.js drew the history on the canvas
    page.wait_for_function("() => Chart.getChart(document.getElementById('history')) !== undefined")

    page.goto(f"{live_server.url}/backfills/")
    page.select_option("select[name=job]", "orders-hourly")
    page.fill("input[name=range_start]", str(assets[0].id))
    page.fill("input[name=range_end]", str(assets[-1].id))
    page.click("text=Preview the plan")
    page.wait_for_selector("#preview .msg")
    assert "3 batch(es), 6 items, total weight 180" in page.inner_text("#preview")
    page.screenshot(path="/tmp/backfills.png", full_page=True)
    assert job.backfills.count() == 0  # a preview creates nothing
