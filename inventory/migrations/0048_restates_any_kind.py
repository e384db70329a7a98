"""Restatements go first for every kind whose items record what they restate, Iceberg's
snapshots as Delta's versions (0048_restates_any_kind.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0047_moves_in_schema"),
    ]

    operations = [
        RunSQLFile("0048_restates_any_kind.sql"),
    ]
