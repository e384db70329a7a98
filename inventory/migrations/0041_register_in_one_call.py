"""Asset registration in one call whose plans the session keeps; the prefix-sum trigger fires only
for rows without their sums (0041_register_in_one_call.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0040_cached_plans"),
    ]

    operations = [
        RunSQLFile("0041_register_in_one_call.sql", reverse="noop"),
    ]
