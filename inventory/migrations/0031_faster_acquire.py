"""Faster acquire + succeed: one batch planned by one prepared statement, no work that finds nothing."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0029_one_transition_owner")]

    operations = [RunSQLFile("0031_faster_acquire.sql")]
