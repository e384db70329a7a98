"""One overlap rule between the incremental and backfill lanes, with or without a sink."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0024_watermark_boundaries")]

    operations = [RunSQLFile("0025_one_overlap_rule.sql")]
