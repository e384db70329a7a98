"""Restatements go first: a batch whose items restate outputs not rebuilt yet waits for the job's
restatement at the publish fence and in the incremental planner (0042_restatements_go_first.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0041_register_in_one_call"),
    ]

    operations = [
        RunSQLFile("0042_restatements_go_first.sql"),
    ]
