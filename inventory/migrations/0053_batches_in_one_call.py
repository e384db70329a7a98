"""Several batches in one call: tidemark_acquire_batches starts up to k batches of a job for one
worker, tidemark_succeed_batches commits several (0053_batches_in_one_call.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0052_unrecorded_outputs"),
    ]

    operations = [
        RunSQLFile("0053_batches_in_one_call.sql", reverse="noop"),
    ]
