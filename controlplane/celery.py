"""The Celery application; tasks live in workers/tasks.py."""

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger, beat_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("tidemark")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


@after_setup_logger.connect
@after_setup_task_logger.connect
def redact_worker_logs(logger=None, **kwargs):
    """Celery replaces Django's log handlers in its processes: give its handlers the same filter
    that keeps configured credentials out of every log line."""
    from inventory.services.secrets import RedactingFilter

    for handler in getattr(logger, "handlers", ()):
        handler.addFilter(RedactingFilter())


@beat_init.connect
def register_schedules(sender=None, **kwargs):
    """Whenever beat starts, Tidemark's periodic work (reaper, pacing, discovery, job schedules)
    is registered from code, so `celery beat` alone is enough. Beat refuses to start without it:
    a beat that runs no reaper would leave dead workers' batches `running` forever, silently."""
    from inventory.services.scheduling import schedules_sync

    try:
        report = schedules_sync()
    except Exception as exc:
        logging.getLogger(__name__).critical("cannot register Tidemark's schedules: %s", exc)
        # SystemExit passes Celery's signal dispatch (which logs and swallows Exceptions)
        raise SystemExit(f"celery beat: cannot register Tidemark's schedules: {exc}") from exc
    logging.getLogger(__name__).info(
        "Tidemark schedules registered: %d created, %d updated, %d removed",
        len(report.created),
        len(report.updated),
        len(report.removed),
    )
