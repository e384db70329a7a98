"""Deleting from the dashboard in a real browser (Debian's Chromium through Playwright, against
gunicorn): an admin goes from the job's page to the confirmation, reads what goes and what stays,
deletes, then deletes the connector from the connectors page; the confirmation page fits a phone's
width. Screenshots: job-delete-*.png (tests/support/browser.py: shoot)."""

import pytest

from inventory.models import Connector, Job
from inventory.services import lifecycle
from tests.support.browser import _log_in, shoot
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_deletes_a_job_and_its_connector_after_a_confirmation(
    browser, web_server, role_users
):
    connector = ConnectorFactory(name="gone-src")
    make_assets(connector, [10] * 3)
    job = make_job(connector=connector, name="gone-job", batch_weight=10)
    job.sink = {"kind": "files", "path": "/data/out/gone-job", "format": "parquet"}
    job.save(update_fields=["sink"])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)

    page = browser.new_page()
    _log_in(page, web_server.url, role_users["admin"], next_path="/jobs/gone-job/")
    page.click("#delete-job")
    page.wait_for_url(f"{web_server.url}/jobs/gone-job/delete/")
    assert "its 1 batch (succeeded 1)" in page.inner_text("#what-goes")
    assert "/data/out/gone-job" in page.inner_text("#what-stays")
    for width in (390, 1440):
        page.set_viewport_size({"width": width, "height": 900})
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{overflow} px wider than the window at {width} px"
    shoot(page, "job-delete")
    page.click("#delete-form [type=submit]")
    page.wait_for_url(f"{web_server.url}/")
    assert "Job gone-job deleted" in page.inner_text("main")
    assert not Job.objects.filter(name="gone-job").exists()

    page.goto(f"{web_server.url}/connectors/")
    page.click("#delete-gone-src")
    page.wait_for_url(f"{web_server.url}/connectors/gone-src/delete/")
    assert "its 3 registered items" in page.inner_text("main")
    page.click("#delete-form [type=submit]")
    page.wait_for_url(f"{web_server.url}/connectors/")
    assert "Connector gone-src deleted" in page.inner_text("main")
    assert not Connector.objects.filter(name="gone-src").exists()


def test_an_operator_is_offered_no_delete_and_is_refused_the_page(browser, web_server, role_users):
    connector = ConnectorFactory(name="kept-src")
    make_job(connector=connector, name="kept-job", batch_weight=10)
    page = browser.new_page()
    _log_in(page, web_server.url, role_users["operator"], next_path="/jobs/kept-job/")
    assert page.locator("#delete-job").count() == 0
    answer = page.goto(f"{web_server.url}/jobs/kept-job/delete/")
    assert answer.status == 403
    assert Job.objects.filter(name="kept-job").exists()
