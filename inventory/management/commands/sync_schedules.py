"""Register Tidemark's periodic work in django-celery-beat (idempotent; beat also runs it)."""

from django.core.management.base import BaseCommand

from inventory.services.scheduling import schedules_sync


class Command(BaseCommand):
    help = "Make django-celery-beat's entries match the jobs, connectors and maintenance steps."

    def handle(self, *args, **options):
        report = schedules_sync()
        if options["verbosity"] < 1:
            return
        for label, names in (
            ("created", report.created),
            ("updated", report.updated),
            ("removed", report.removed),
        ):
            for name in names:
                self.stdout.write(f"{label} {name}")
        if not (report.created or report.updated or report.removed):
            self.stdout.write("schedules already up to date")
