from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _register_schedules(sender, using="default", **kwargs):
    """After `migrate`, Tidemark's periodic work is registered in django-celery-beat's tables
    (beat does it again whenever it starts; see controlplane/celery.py)."""
    from inventory.services.scheduling import schedules_sync

    if using == "default":
        schedules_sync()


class InventoryConfig(AppConfig):
    name = "inventory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        post_migrate.connect(_register_schedules, sender=self, dispatch_uid="tidemark-schedules")
