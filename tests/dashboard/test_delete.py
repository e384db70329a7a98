"""Deleting a job or a connector from the dashboard: admins only (viewers and operators get 403 on
the page and on the POST), a confirmation page saying what goes (batches, watermark history) and
what stays (the sink's output), CSRF enforced, a running batch or a reading job refused."""

import pytest
from django.test import Client

from inventory.models import Batch, Connector, Job, Watermark
from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def _client(user, **kwargs):
    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def job():
    connector = ConnectorFactory(name="doomed-src")
    make_assets(connector, [10] * 4)
    job = make_job(connector=connector, name="doomed", batch_weight=10)
    job.sink = {"kind": "files", "path": "/data/out/doomed", "format": "parquet"}
    job.save(update_fields=["sink"])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    return job


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_an_admin_may_see_or_use_the_delete_pages(job, role_users, role):
    client = _client(role_users[role])
    for url in ("/jobs/doomed/delete/", "/connectors/doomed-src/delete/"):
        assert client.get(url).status_code == 403
        assert client.post(url).status_code == 403
    assert Job.objects.filter(name="doomed").exists()
    assert Connector.objects.filter(name="doomed-src").exists()
    # and they are not offered the link
    assert "Delete job" not in client.get("/jobs/doomed/").content.decode()
    assert "/connectors/doomed-src/delete/" not in client.get("/connectors/").content.decode()
    assert Client().get("/jobs/doomed/delete/").status_code == 302  # to the login page


def test_the_confirmation_says_what_goes_and_that_the_sinks_output_stays(job, role_users):
    client = _client(role_users["admin"])
    detail = client.get("/jobs/doomed/").content.decode()
    assert 'href="/jobs/doomed/delete/"' in detail
    page = client.get("/jobs/doomed/delete/").content.decode()
    assert "Delete job doomed?" in page
    assert "its 1 batch (succeeded 1)" in page
    assert "its watermark and its history (1 change)" in page
    assert "is <strong>not</strong> deleted" in page and "<code>/data/out/doomed</code>" in page
    assert 'data-action="job.delete"' in page and "disabled" not in page

    # the connector cannot go while the job reads it: said before the button, which is disabled
    page = client.get("/connectors/doomed-src/delete/").content.decode()
    assert "its 4 registered items" in page
    assert "Jobs still read it:" in page and 'href="/jobs/doomed/delete/"' in page
    assert "disabled" in page
    refused = client.post("/connectors/doomed-src/delete/")
    assert refused.status_code == 409
    assert "is used by job(s) doomed; delete them first" in refused.content.decode()

    gone = client.post("/jobs/doomed/delete/", follow=True)
    assert gone.redirect_chain[-1][0] == "/"
    assert "Job doomed deleted with its batches and watermark history." in gone.content.decode()
    assert not Job.objects.filter(name="doomed").exists()
    assert not Batch.objects.filter(job_id=job.pk).exists()
    assert not Watermark.objects.filter(job_id=job.pk).exists()

    connectors = client.get("/connectors/").content.decode()
    assert 'href="/connectors/doomed-src/delete/"' in connectors
    gone = client.post("/connectors/doomed-src/delete/", follow=True)
    assert gone.redirect_chain[-1][0] == "/connectors/"
    assert "Connector doomed-src deleted with its registered items." in gone.content.decode()
    assert not Connector.objects.filter(name="doomed-src").exists()


def test_a_job_with_a_running_batch_is_refused_and_kept(job, role_users):
    running = lifecycle.batch_acquire(job=job, worker="w")
    client = _client(role_users["admin"])
    page = client.get("/jobs/doomed/delete/").content.decode()
    assert "1 batch of it is running: cancel it or let it finish first." in page
    assert "disabled" in page
    refused = client.post("/jobs/doomed/delete/")
    assert refused.status_code == 409
    assert f"batch {running.pk} of job doomed is running; cancel it or wait" in (
        refused.content.decode()
    )
    assert Job.objects.filter(name="doomed").exists()


def test_a_delete_without_the_csrf_token_is_refused(job, role_users):
    client = _client(role_users["admin"], enforce_csrf_checks=True)
    assert client.post("/jobs/doomed/delete/").status_code == 403
    assert client.post("/connectors/doomed-src/delete/").status_code == 403
    assert Job.objects.filter(name="doomed").exists()
    page = client.get("/jobs/doomed/delete/").content.decode()
    assert 'name="csrfmiddlewaretoken"' in page
