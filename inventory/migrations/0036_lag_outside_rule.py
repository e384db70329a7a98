"""The rule "a job whose lag is counted outside the prefix sums" as one SQL function,
tidemark_lag_outside (0036_lag_outside_rule.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0035_faster_acquire_searches")]

    operations = [RunSQLFile("0036_lag_outside_rule.sql")]
