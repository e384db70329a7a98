"""The dashboard in a real browser: Debian's Chromium driven by Playwright against gunicorn with
DEBUG off (the production web process), static files served by WhiteNoise."""

import pytest

from inventory.services import lifecycle
from tests.support.browser import _log_in
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_page_gets_its_stylesheets_and_scripts(browser, web_server, role_users):
    connector = ConnectorFactory(name="styled")
    make_assets(connector, [10] * 3)
    job = make_job(connector=connector, name="styled-job", batch_weight=10, max_items=1)
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)

    page = browser.new_page()
    assets_seen = {}

    def record(response):
        if response.request.resource_type in ("stylesheet", "script"):
            assets_seen[response.url] = response.status

    page.on("response", record)
    # the Content-Security-Policy (issue 42): no page may need what it refuses (an inline
    # script or style element, eval); Chromium reports each refusal on the console and as a
    # securitypolicyviolation event
    refused = []
    page.on(
        "console",
        lambda message: "Content Security Policy" in message.text and refused.append(message.text),
    )
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI"
        " + ' on ' + location.pathname + ': ' + (e.sample || '')))"
    )
    _log_in(page, web_server.url, role_users["admin"], next_path="/")
    pages = [
        "/",
        f"/jobs/{job.name}/",
        "/connectors/",
        "/backfills/",
        f"/batches/{batch.id}/",
        "/api/docs/",
        "/admin/",
        "/admin/inventory/job/",
    ]
    for path in pages:
        response = page.goto(f"{web_server.url}{path}")
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
    assert any(url.endswith(".css") for url in assets_seen), assets_seen
    assert any("htmx" in url for url in assets_seen), assets_seen
    assert any("chart" in url for url in assets_seen), assets_seen
    broken = {url: status for url, status in assets_seen.items() if status != 200}
    assert not broken, broken
    # the dashboard's own stylesheet is applied, not only fetched
    page.goto(f"{web_server.url}/")
    header = page.evaluate("() => getComputedStyle(document.querySelector('header.top')).display")
    assert header == "flex"  # tidemark.css lays the header out; unstyled it is "block"
    # Swagger UI started (its start-up script is a file of its own, not inline)
    page.goto(f"{web_server.url}/api/docs/")
    page.wait_for_selector(".swagger-ui .info", timeout=15000)
    assert not refused, refused


def test_an_operator_logs_in_reads_a_job_and_previews_a_backfill(browser, web_server, role_users):
    operator = role_users["operator"]
    connector = ConnectorFactory(name="orders")
    assets = make_assets(connector, [30] * 6)
    job = make_job(connector=connector, name="orders-hourly", batch_weight=60, max_items=5)
    for _ in range(2):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)

    page = browser.new_page()
    _log_in(page, web_server.url, operator, next_path="/jobs/orders-hourly/")

    assert page.inner_text("dl.facts").count(str(assets[3].id)) >= 1  # the committed watermark
    # Chart.js drew the history on the canvas
    page.wait_for_function("() => Chart.getChart(document.getElementById('history')) !== undefined")

    page.goto(f"{web_server.url}/backfills/")
    page.fill("input[name=job]", "orders-hourly")
    page.fill("input[name=range_start]", str(assets[0].id))
    page.fill("input[name=range_end]", str(assets[-1].id))
    page.click("text=Preview the plan")
    # the live preview may first answer for a half-typed form: wait for the whole one's answer
    page.wait_for_function(
        "() => document.querySelector('#plan-summary')?.innerText.includes('3 batch(es)')"
    )
    assert "3 batch(es), 6 items, total weight 180" in page.inner_text("#preview")
    page.screenshot(path="/tmp/backfills.png", full_page=True)
    assert job.backfills.count() == 0  # a preview creates nothing


def test_the_overview_waits_to_refresh_while_the_jobs_filter_has_the_focus(
    browser, web_server, role_users
):
    """The overview refreshes itself every 5 s, but not under a user typing a filter. That rule
    was an htmx trigger filter, which htmx runs with eval; under the Content-Security-Policy it
    is a script file (static/js/overview.js), and htmx's eval is off."""
    make_job(connector=ConnectorFactory(name="typed"), name="typed-job", batch_weight=10)
    page = browser.new_page()
    _log_in(page, web_server.url, role_users["viewer"], next_path="/")
    refreshes = []
    page.on("request", lambda request: request.headers.get("hx-request") and refreshes.append(1))
    page.click("#jobs-filter input[name=q]")
    page.keyboard.type("typ")
    page.wait_for_timeout(6500)  # past one refresh interval
    assert refreshes == []
    assert page.input_value("#jobs-filter input[name=q]") == "typ"
    page.click("h1")  # the filter loses the focus: the refreshes go on
    with page.expect_request(lambda request: request.headers.get("hx-request") == "true"):
        pass
