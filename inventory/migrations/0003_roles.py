"""Create the role groups viewer / operator / admin with their admin-site model permissions."""

from django.db import migrations

# Frozen copy of inventory.roles.ROLE_PERMISSIONS at the time of this migration.
_MODELS = (
    "connector",
    "asset",
    "job",
    "batch",
    "batchattempt",
    "backfill",
    "watermark",
    "watermarkevent",
)
_VIEW = {f"view_{model}" for model in _MODELS}
ROLE_PERMISSIONS = {
    "viewer": _VIEW,
    "operator": _VIEW,
    "admin": _VIEW
    | {
        f"{action}_{model}"
        for model in ("connector", "job")
        for action in ("add", "change", "delete")
    }
    | {"change_watermark"},
}


def create_roles(apps, schema_editor):
    # Permissions are normally created after all migrations ran; create them now so they can be
    # attached to the groups on a fresh database.
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(
            Permission.objects.filter(content_type__app_label="inventory", codename__in=codenames)
        )


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("inventory", "0002_plan_function"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
