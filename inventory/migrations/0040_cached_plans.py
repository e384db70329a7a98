"""Two statements of acquire + succeed keep their plans for the session instead of being planned
at every call (0040_cached_plans.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0039_lag_one_row"),
    ]

    operations = [
        RunSQLFile("0040_cached_plans.sql", reverse="noop"),
    ]
