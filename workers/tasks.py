"""Celery tasks: thin. Each fetches by id, calls one service, and owns its retry policy."""

import logging

from celery import current_app, shared_task
from django.conf import settings

from inventory.models import Connector
from inventory.services import dispatch, freshness, retention_forecast, scheduling
from workers import execution, executors, threads_pool, warm_session

log = logging.getLogger(__name__)

warm_session.install()
threads_pool.install(current_app)

_LIMIT = settings.TIDEMARK_BATCH_TIME_LIMIT
# a nudge takes batches for up to execution.WORK_SECONDS, the last of which may run its whole limit
_WORK_LIMIT = int(execution.WORK_SECONDS) + _LIMIT


@shared_task(
    name="tidemark.run_job",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=_WORK_LIMIT,
    time_limit=_WORK_LIMIT + 30,
    ignore_result=True,
)
def run_job(job_id: int) -> dict:
    """A nudge: job `job_id` may have work. Take its batches through acquire and run them (no
    new items: no batch, and Spark is not touched). Idempotent: a nudge too many finds nothing."""
    outcomes = execution.job_work(
        job_id=job_id, executor_for=executors.executor_for, has_room=_slot_free
    )
    return {"job": job_id, "batches": {o.batch_id: o.status for o in outcomes}}


def _slot_free() -> bool:
    slots = warm_session.batch_slots()
    return slots.running() < slots.limit


@shared_task(name="tidemark.discover_assets", acks_late=True, time_limit=600, ignore_result=True)
def discover_assets(connector_id: int) -> dict:
    connector = Connector.objects.filter(pk=connector_id).first()
    if connector is None:
        return {"connector": connector_id, "new": 0, "reason": "no such connector"}
    return {"connector": connector.name, "new": scheduling.connector_discover(connector=connector)}


# beat's fixed steps: a copy that waited in the broker while the step ran is skipped
# (scheduling.fixed_step_run, by the database's clock)
def _fixed_step(name: str, step):
    outcome = scheduling.fixed_step_run(name, step)
    return str(outcome) if isinstance(outcome, scheduling.StepSkipped) else outcome


@shared_task(name="tidemark.reap_leases", time_limit=120, ignore_result=True)
def reap_leases() -> list[int] | str:
    return _fixed_step(scheduling.REAPER, scheduling.leases_reap)


@shared_task(name="tidemark.requeue_due", time_limit=120, ignore_result=True)
def requeue_due() -> list[int] | str:
    return _fixed_step(scheduling.REQUEUE, dispatch.batches_dispatch_due)


@shared_task(name="tidemark.pace_backfills", time_limit=120, ignore_result=True)
def pace_backfills() -> dict | str:
    return _fixed_step(
        scheduling.PACE_BACKFILLS,
        lambda: {str(k): v for k, v in freshness.backfills_pace_step().items()},
    )


@shared_task(name="tidemark.release_connectors", time_limit=120, ignore_result=True)
def release_connectors() -> list[str] | str:
    return _fixed_step(scheduling.RELEASE_CONNECTORS, scheduling.connectors_orchestrate)


@shared_task(name="tidemark.sync_schedules", time_limit=120, ignore_result=True)
def sync_schedules() -> dict | str:
    return _fixed_step(scheduling.SYNC_SCHEDULES, lambda: scheduling.schedules_sync().as_dict())


@shared_task(name="tidemark.retention_forecasts", time_limit=600, ignore_result=True)
def retention_forecasts() -> dict | str:
    return _fixed_step(
        scheduling.RETENTION_FORECASTS, retention_forecast.retention_forecasts_refresh
    )
