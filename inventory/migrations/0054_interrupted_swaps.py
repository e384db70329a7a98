"""A files sink puts its staging in order inside each publish's fence (a swap whose worker died
before the fence committed undone, dead attempts' staging dropped): the fence answers what it
asks about those batches (tidemark_publish_outputs, 0054_interrupted_swaps.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0053_batches_in_one_call"),
    ]

    operations = [
        RunSQLFile("0054_interrupted_swaps.sql", reverse="noop"),
    ]
