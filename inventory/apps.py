from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _after_migrate(sender, using="default", **kwargs):
    """After `migrate`: Tidemark's periodic work is registered in django-celery-beat's tables
    (beat does it again whenever it starts; see controlplane/celery.py), and the role groups get
    the admin-site permissions of models added since the groups were made (auth created them just
    before: its handler runs first)."""
    from inventory.roles import role_groups_ensure
    from inventory.services.scheduling import schedules_sync

    if using == "default":
        schedules_sync()
        role_groups_ensure()


class InventoryConfig(AppConfig):
    name = "inventory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        post_migrate.connect(_after_migrate, sender=self, dispatch_uid="tidemark-after-migrate")
        # restatements follow a commit that replaced outputs down job_output chains
        from inventory.services import restatements  # noqa: F401 - connects its receiver
