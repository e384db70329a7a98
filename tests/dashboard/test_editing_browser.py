"""Creating and changing connectors and jobs, and setting the shared throttle, from the dashboard
in a real browser (Debian's Chromium through Playwright) against gunicorn. The API's validation
messages appear beside the field they name. Every page visited is saved as a screenshot at a
desktop and a phone width (tests/support/browser.py: shoot)."""

import json

import pytest

from inventory.models import BackfillThrottle, Connector, Job
from tests.support.browser import _log_in, shoot

pytestmark = pytest.mark.django_db(transaction=True)


def _field_error(page, name: str) -> str:
    return page.inner_text(f".err[data-field={name}]")


def test_an_admin_creates_a_connector_and_a_job_with_the_apis_messages_inline(
    browser,
    web_server,
    role_users,
    tmp_path,
):
    landing = tmp_path / "landing"
    landing.mkdir()
    page = browser.new_page()
    page.goto(f"{web_server.url}/")
    assert page.locator("form#login-form").is_visible()  # the dashboard's own login page
    shoot(page, "login")
    _log_in(page, web_server.url, role_users["admin"], next_path="/connectors/")

    page.click("#new-connector")
    page.wait_for_url(f"{web_server.url}/new/connector/")
    page.fill("input[name=name]", "typed-src")
    page.select_option("select[name=kind]", "files")
    # no directory: the service's message (the API's 400), beside the config field
    page.fill("textarea[name=config]", json.dumps({"pth": str(landing)}))
    page.click("#connector-form [type=submit]")
    assert "config.path: a files connector needs a directory path" in _field_error(page, "config")
    assert page.locator(".field.invalid textarea[name=config]").count() == 1
    assert not Connector.objects.filter(name="typed-src").exists()
    # not JSON at all: the form says so, beside the same field
    page.fill("textarea[name=config]", "{path: nowhere")
    page.click("#connector-form [type=submit]")
    assert "is not JSON" in _field_error(page, "config")
    shoot(page, "connector-form-error")
    page.fill("textarea[name=config]", json.dumps({"path": str(landing)}))
    page.fill("input[name=labels]", "typed, demo")
    page.click("#connector-form [type=submit]")
    page.wait_for_url(f"{web_server.url}/connectors/")
    connector = Connector.objects.get(name="typed-src")
    assert connector.kind == "files" and connector.labels == ["typed", "demo"]
    assert "Connector typed-src created." in page.inner_text("main")

    # a job for it, from the row's link (the connector filled in)
    page.click("#connector-typed-src >> text=add a job")
    assert page.input_value("input[name=connector]") == "typed-src"
    page.fill("input[name=name]", "typed-job")
    page.fill("input[name=batch_weight]", "0")
    page.fill("textarea[name=sink]", json.dumps({"kind": "files", "path": str(tmp_path / "out")}))
    page.click("#job-form [type=submit]")
    assert _field_error(page, "batch_weight")  # the API's bound, beside the field
    assert not Job.objects.filter(name="typed-job").exists()
    shoot(page, "job-form-error")
    page.fill("input[name=batch_weight]", "1000")
    page.fill("input[name=max_items]", "5")
    page.click("#job-form [type=submit]")
    page.wait_for_url(f"{web_server.url}/jobs/typed-job/")
    job = Job.objects.get(name="typed-job")
    assert (job.connector_id, job.batch_weight, job.max_items) == (connector.pk, 1000, 5)

    # change it: name and connector are fixed, the budget is not
    page.click("#edit-job")
    page.wait_for_url(f"{web_server.url}/jobs/typed-job/edit/")
    assert page.locator("input[name=name]").is_disabled()
    page.fill("input[name=max_items]", "7")
    shoot(page, "job-edit")
    page.click("#job-form [type=submit]")
    page.wait_for_url(f"{web_server.url}/jobs/typed-job/")
    job.refresh_from_db()
    assert job.max_items == 7 and job.batch_weight == 1000

    # and the connector: its labels change, its kind cannot
    page.goto(f"{web_server.url}/connectors/")
    page.click("#connector-typed-src >> text=typed-src")
    page.wait_for_url(f"{web_server.url}/connectors/typed-src/edit/")
    assert page.locator("select[name=kind]").is_disabled()
    page.fill("input[name=labels]", "typed")
    page.click("#connector-form [type=submit]")
    page.wait_for_url(f"{web_server.url}/connectors/")
    connector.refresh_from_db()
    assert connector.labels == ["typed"]


def test_an_operator_sets_and_removes_the_shared_throttle(
    browser,
    web_server,
    role_users,
):
    page = browser.new_page()
    _log_in(page, web_server.url, role_users["operator"], next_path="/backfills/")
    assert "No shared throttle" in page.inner_text("#throttle")
    page.fill("#throttle-form input[name=weight_per_minute]", "12000")
    with page.expect_navigation():
        page.click("#throttle-form [type=submit]")
    assert "Shared throttle for all connectors: 12,000 weight/min." in page.inner_text("main")
    assert "0 of 12,000 weight/min" in page.inner_text("#throttle")
    assert BackfillThrottle.objects.get(connector=None).weight_per_minute == 12000
    shoot(page, "backfills-throttle")
    # a bad budget: refused with the field's reason, nothing changed
    page.fill("#throttle-form input[name=weight_per_minute]", "-5")
    with page.expect_navigation():
        page.click("#throttle-form [type=submit]")
    assert "Throttle not changed" in page.inner_text("main")
    assert BackfillThrottle.objects.get(connector=None).weight_per_minute == 12000
    # empty: removed
    page.fill("#throttle-form input[name=weight_per_minute]", "")
    with page.expect_navigation():
        page.click("#throttle-form [type=submit]")
    assert not BackfillThrottle.objects.exists()
