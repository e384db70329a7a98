"""A connector's last asset below an id and a job's lag are planned as one row each
(0039_lag_one_row.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0038_plan_by_prefix_sums"),
    ]

    operations = [
        RunSQLFile("0039_lag_one_row.sql", reverse="noop"),
    ]
