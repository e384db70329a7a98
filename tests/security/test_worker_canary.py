"""A canary secret in a real worker's environment never leaves it: a batch whose processor fails
with the secret in its message is stored, logged, shown and sent over Celery without it."""

import uuid

import pytest
from celery.signals import before_task_publish
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

import tests.support.worker_processors  # noqa: F401 - registers the test processors here too
from inventory.models import Batch, BatchStatus
from inventory.services.connectors import connector_create
from inventory.services.scheduling import job_run_now
from inventory.sources import files
from tests.support.factories import make_job
from tests.support.worker_fixtures import WorkerProcess, wait_until, write_orders

pytestmark = pytest.mark.django_db(transaction=True)

CANARY = f"canary-{uuid.uuid4().hex[:12]}"


def test_slow_a_secret_in_the_workers_environment_stays_there(
    tmp_path, worker_env, private_queue, worker_log_dir, role_users
):
    worker = WorkerProcess(
        env={
            **worker_env,
            "CELERY_QUEUE": private_queue,
            "TM_CANARY_SECRET": f"host=db user=etl password={CANARY}",
        },
        queue=private_queue,
        name="canary",
        log_dir=worker_log_dir,
    ).start()
    published = []

    def capture(body=None, headers=None, **kwargs):
        published.append(repr(body) + repr(headers))

    before_task_publish.connect(capture)
    try:
        landing = tmp_path / "landing"
        write_orders(landing / "a.parquet", first_id=1, count=3)
        connector = connector_create(name="canary-src", kind="files", config={"path": str(landing)})
        files.directory_discover(connector=connector)
        job = make_job(
            connector=connector,
            name="canary-job",
            processor="test_leak_env",
            params={"env": "TM_CANARY_SECRET"},
            sink={"kind": "files", "path": str(tmp_path / "sink")},
            max_attempts=1,
        )
        (batch_id,) = job_run_now(job=job).planned
        wait_until(
            lambda: Batch.objects.get(pk=batch_id).status == BatchStatus.DEAD,
            timeout=120,
            message="the batch to fail",
        )
    finally:
        before_task_publish.disconnect(capture)
        worker.stop()

    batch = Batch.objects.get(pk=batch_id)
    assert "could not connect" in str(batch.error)  # the failure itself is kept and readable
    assert CANARY not in repr(batch.error) and CANARY not in repr(batch.result)
    assert CANARY not in repr(list(batch.attempts.values()))
    assert published and not any(CANARY in message for message in published)
    assert CANARY not in worker.log(), "the worker logged the secret"
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=role_users['viewer'])}")
    for url in (f"/api/v1/batches/{batch_id}/", "/api/v1/batches/", f"/api/v1/jobs/{job.name}/"):
        assert CANARY not in api.get(url).content.decode(), url
