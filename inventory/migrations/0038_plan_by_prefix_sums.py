"""Planning by prefix sums: the two indexes planning searches (a connector's assets by running
weight, by running count), then the functions (0038_plan_by_prefix_sums.sql)."""

from django.db import migrations, models

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0037_watermark_one_unique_index"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="asset",
            index=models.Index(
                fields=["connector", "cum_weight", "id"], name="asset_connector_cum_weight_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="asset",
            index=models.Index(
                fields=["connector", "cum_count"], name="asset_connector_cum_count_idx"
            ),
        ),
        RunSQLFile("0038_plan_by_prefix_sums.sql"),
    ]
