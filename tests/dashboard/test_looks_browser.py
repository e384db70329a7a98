"""The pages this project's first hour visits, in a real browser (Debian's Chromium through
Playwright) against gunicorn, at a desktop's and a phone's width: the pipeline graph, the job page
with its watermark chart on a time axis, the batch page, the job form and the backfill preview.
None of them is wider than the window (the preview's histogram widened a 390 px page to 642 px).
Each page is saved as a screenshot (tests/support/browser.py: shoot)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import WatermarkEvent
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from tests.support.browser import WIDTHS, _log_in, shoot
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db(transaction=True)


def _fits(page, name: str = "") -> None:
    """No horizontal overflow at either width; the page saved at both when named."""
    for width in WIDTHS.values():
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(100)  # the chart redraws on resize
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert scroll <= inner, f"{name or page.url} at {width} px is {scroll} px wide"
    if name:
        shoot(page, name)


def _pipeline(tmp_path):
    """orders -> clean -> its files -> clean-src (job_output) -> report; history, then live."""
    orders = ConnectorFactory(name="orders", labels=["history"])
    make_assets(orders, [2_000_000] * 24)
    clean = make_job(
        connector=orders,
        name="clean",
        batch_weight=4_000_000,
        max_items=2,
        sink={"kind": "files", "path": str(tmp_path / "clean")},
    )
    for _ in range(3):
        batch = lifecycle.batch_acquire(job=clean, worker="w")
        lifecycle.batch_succeed(
            batch_id=batch.id, attempt=batch.attempt, result={"rows_out": 10, "bytes": 196608}
        )
    # the watermark moved at uneven times: the chart spaces them by time, not by event
    now = timezone.now()
    for event, ago in zip(
        WatermarkEvent.objects.filter(watermark__job=clean).order_by("id"), (60, 55, 5), strict=True
    ):
        WatermarkEvent.objects.filter(pk=event.pk).update(created_at=now - timedelta(minutes=ago))
    reader = connector_create(name="clean-src", kind="job_output", config={"job": "clean"})
    make_job(connector=reader, name="report", sink={"kind": "delta", "path": str(tmp_path / "r")})
    live = ConnectorFactory(name="live-orders", start_after="history", state="waiting")
    make_job(connector=live, name="live-clean")
    return clean, batch


def test_the_graph_job_batch_form_and_preview_pages_fit_a_phone_and_a_desktop(
    browser,
    web_server,
    role_users,
    tmp_path,
):
    clean, batch = _pipeline(tmp_path)
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    _log_in(page, web_server.url, role_users["admin"], next_path="/graph/")

    # the graph: every node drawn, coloured, linking to its page
    nodes = page.locator("svg#pipeline-graph a.node")
    assert nodes.count() == 8  # 3 connectors, 3 jobs, 2 sinks
    assert page.get_attribute('a[data-node="j:clean"]', "data-state") == "behind"
    assert page.get_attribute('a[data-node="j:live-clean"]', "data-state") == "waiting"
    assert page.locator("path.edge.start_after").count() == 1
    _fits(page, "graph")
    page.fill("#graph-filter input[name=q]", "report")
    page.click("#graph-filter button")
    page.wait_for_url(f"{web_server.url}/graph/?q=report")
    assert page.locator("svg#pipeline-graph a.node").count() == 3
    page.click('a[data-node="j:report"]')
    page.wait_for_url(f"{web_server.url}/jobs/report/")

    # the job page: the watermark chart on a time axis, whole item ids on the other
    page.goto(f"{web_server.url}/jobs/clean/")
    page.wait_for_function("window.Chart && Chart.getChart('history')")
    x_type, ticks, xs = page.evaluate(
        """() => { const c = Chart.getChart('history');
        return [c.scales.x.type, c.scales.y.ticks.map((t) => t.value),
                c.data.datasets[0].data.map((p) => p.x)]; }"""
    )
    assert x_type == "linear"
    assert all(float(t).is_integer() for t in ticks), ticks
    # spaced by time: 5 minutes between the first two points, 50 before the last
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert gaps[-1] == pytest.approx(10 * gaps[0], rel=0.05), gaps
    _fits(page, "job-watermark-chart")

    page.goto(f"{web_server.url}/batches/{batch.id}/")
    assert "197 kB" in page.inner_text("#metrics")
    _fits(page, "batch-result")

    page.goto(f"{web_server.url}/new/job/?connector=orders")
    assert (
        page.locator("select[name=sink_kind] option").count() == 5
    )  # none, then files, postgres, delta, iceberg
    _fits(page, "job-new")

    # the backfill preview with its histogram of batches against the budget
    page.goto(f"{web_server.url}/backfills/")
    page.fill("input[name=job]", "clean")
    page.fill("input[name=range_start]", "0")
    page.fill("input[name=range_end]", "100000")
    page.wait_for_selector("#plan-summary")
    assert page.locator(".histogram .bin").count() >= 1
    # asked from 0, the first batch is shown from its first item
    first = clean.connector.assets.order_by("id").first().id
    row = page.locator("details:has(summary:text('The batches')) tbody tr").first
    assert row.locator("td").nth(1).text_content().startswith(f"{first}–")
    _fits(page, "backfill-preview-histogram")

    for path in (
        "/",
        "/connectors/",
        "/backfills/",
    ):  # shot by tests/dashboard/test_flows_browser.py
        page.goto(f"{web_server.url}{path}")
        _fits(page)
