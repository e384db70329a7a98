"""Celery tasks: thin. Each fetches by id, calls one service, and owns its retry policy."""

import logging

from celery import current_app, shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from inventory.models import Connector, Job
from inventory.services import dispatch, execution, scheduling
from workers import executors, threads_pool
from workers.warm_session import install as _install_warm_session

log = logging.getLogger(__name__)

_install_warm_session()
threads_pool.install(current_app)

_LIMIT = settings.TIDEMARK_BATCH_TIME_LIMIT
# a little past the backoff, so the retry finds its batch due
_RETRY_SLACK_SECONDS = 0.5


@shared_task(
    name="tidemark.run_batch",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=max(_LIMIT - 30, 5),
    time_limit=_LIMIT,
    ignore_result=True,
)
def run_batch(batch_id: int) -> dict:
    """Run one batch if it is queued (or a due retry); anything else is left as it is."""
    try:
        outcome = execution.batch_execute(batch_id=batch_id, executor_for=executors.executor_for)
    except (OperationalError, InterfaceError) as exc:
        # batch_execute retries its own database calls; should one still fail, the message must
        # not be lost with it (the database keeps the batch's state: a second send is harmless)
        log.warning("batch %s: database unavailable (%s); sent again", batch_id, exc)
        dispatch.send(run_batch, batch_id, countdown=execution.DEFERRED_RETRY_SECONDS)
        return {"batch": batch_id, "status": "deferred", "attempt": 0}
    if outcome.retry_in is not None:
        dispatch.send(run_batch, batch_id, countdown=outcome.retry_in + _RETRY_SLACK_SECONDS)
    log.info(
        "batch %s attempt %s: %s %s",
        batch_id,
        outcome.attempt,
        outcome.status,
        outcome.detail[:200],
    )
    return {"batch": batch_id, "status": outcome.status, "attempt": outcome.attempt}


@shared_task(name="tidemark.run_job", acks_late=True, time_limit=300, ignore_result=True)
def run_job(job_id: int) -> dict:
    """A scheduled incremental run: plan what is new and enqueue it (no new items, no work)."""
    job = Job.objects.select_related("connector").filter(pk=job_id).first()
    if job is None:
        return {"job": job_id, "planned": [], "reason": "no such job"}
    outcome = dispatch.job_run(job=job)
    return {"job": outcome.job, "planned": outcome.planned, "reason": outcome.reason}


@shared_task(name="tidemark.discover_assets", acks_late=True, time_limit=600, ignore_result=True)
def discover_assets(connector_id: int) -> dict:
    connector = Connector.objects.filter(pk=connector_id).first()
    if connector is None:
        return {"connector": connector_id, "new": 0, "reason": "no such connector"}
    return {"connector": connector.name, "new": scheduling.connector_discover(connector=connector)}


@shared_task(name="tidemark.reap_leases", time_limit=120, ignore_result=True)
def reap_leases() -> list[int]:
    return scheduling.leases_reap()


@shared_task(name="tidemark.requeue_due", time_limit=120, ignore_result=True)
def requeue_due() -> list[int]:
    return dispatch.batches_dispatch_due()


@shared_task(name="tidemark.pace_backfills", time_limit=120, ignore_result=True)
def pace_backfills() -> dict:
    return {str(k): v for k, v in dispatch.backfills_pace().items()}


@shared_task(name="tidemark.release_connectors", time_limit=120, ignore_result=True)
def release_connectors() -> list[str]:
    return scheduling.connectors_orchestrate()


@shared_task(name="tidemark.sync_schedules", time_limit=120, ignore_result=True)
def sync_schedules() -> dict:
    return scheduling.schedules_sync().as_dict()
