"""Acquire + succeed with fewer statements and calls on their hot path (issue 48): the reaper
called only when a probe finds an expired lease, the next incremental start in one statement in
the common case, one function fewer on the way to the item read, two planning checks in one statement, a commit's batch and attempt
moved in one statement (0051_fewer_statements.sql). Behaviour is unchanged.

Numbered 0051 after 0050_lag_on_watermark; renumbered at merge if needed."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0050_lag_on_watermark"),
    ]

    operations = [
        RunSQLFile("0051_fewer_statements.sql"),
    ]
