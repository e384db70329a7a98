"""tidemark_watermark_boundaries: a watermark's value at each committed batch boundary."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0023_dash_batch_plural")]

    operations = [RunSQLFile("0024_watermark_boundaries.sql")]
