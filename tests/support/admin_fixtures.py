"""Fixtures of the admin's tests (a plugin tests/conftest.py loads): `admin_client_for`, Django's
test client logged in as a given user, and `gappy`, a job with holes between committed batches."""

import pytest

from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job


@pytest.fixture
def admin_client_for(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def gappy():
    """A job with a dead batch (ids[1]) and a cancelled one (ids[3]) between committed ones."""
    connector = ConnectorFactory(name="gappy")
    ids = [a.id for a in make_assets(connector, [10] * 6)]
    job = make_job(connector=connector, name="gappy", batch_weight=10, max_attempts=1)
    for step in ("done", "dead", "done", "cancelled"):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        if step == "done":
            lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
        elif step == "dead":
            lifecycle.batch_fail(batch_id=batch.id, attempt=batch.attempt, error={"message": "x"})
        else:
            lifecycle.batch_cancel(batch_id=batch.id, actor="t", reason="test")
    return job, ids
