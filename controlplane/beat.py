"""celery beat's scheduler: django-celery-beat's DatabaseScheduler, except that one entry whose
schedule celery cannot compute never ends beat.

Celery asks each entry when it is due (`is_due`, on every tick and whenever the schedule
changes); a crontab no date satisfies (`0 0 31 2 *`) raises there, and the exception ended the
whole beat process, the lease reaper and discovery with it. Tidemark's own entries never hold
such a cron (`inventory/services/cron.py` refuses it on save, the schedule sync skips a stored
one); this covers an entry made by hand in the admin, or one read in the moment before a sync
removes it: it is logged and asked again later, and the other entries run.
"""

import logging

from celery import schedules
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

log = logging.getLogger(__name__)

# an entry that could not be computed is asked again after this long
RETRY_SECONDS = 300.0


class SafeEntry(ModelEntry):
    def is_due(self):
        try:
            return super().is_due()
        except Exception as exc:  # whatever celery raises for it, never beat's end
            log.error(
                "beat entry %s is skipped: celery cannot compute when it is due (%s: %s)",
                self.name,
                type(exc).__name__,
                exc,
            )
            return schedules.schedstate(False, RETRY_SECONDS)


class Scheduler(DatabaseScheduler):
    Entry = SafeEntry
