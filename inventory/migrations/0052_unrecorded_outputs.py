"""The publish fence also replaces the outputs a killed attempt may have left unrecorded: the
batches wholly inside the publishing batch's range that ran, recorded no publish and can never
publish again (cancelled, skipped, superseded) (0052_unrecorded_outputs.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0051_fewer_statements"),
    ]

    operations = [
        RunSQLFile("0052_unrecorded_outputs.sql"),
    ]
