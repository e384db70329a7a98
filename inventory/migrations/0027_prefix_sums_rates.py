"""Prefix sums of each connector's assets (a job's lag in two index lookups) and the hourly rates
rollup (the last day's rates without counting batches): the columns and the table, then
inventory/sql/migrations/0027_prefix_sums_rates.sql (backfill and triggers)."""

import django.db.models.deletion
from django.db import migrations, models

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0026_restatements")]

    operations = [
        migrations.AddField(
            model_name="asset",
            name="cum_count",
            field=models.BigIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="asset",
            name="cum_weight",
            field=models.DecimalField(decimal_places=0, editable=False, max_digits=38, null=True),
        ),
        migrations.CreateModel(
            name="JobHourlyRates",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("succeeded", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("items", models.BigIntegerField(default=0)),
                ("weight", models.DecimalField(decimal_places=0, default=0, max_digits=38)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="inventory.job",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("job", "hour"), name="job_hourly_rates_unique")
                ],
            },
        ),
        RunSQLFile("0027_prefix_sums_rates.sql"),
    ]
