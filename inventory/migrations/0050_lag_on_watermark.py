"""A watermark carries the prefix sums below its position (done_count, done_weight), kept by the
database (0050_lag_on_watermark.sql), so /metrics reads every job's lag without a probe of the
assets per job (issue 48).

Numbered 0050 after 0049_changed_files_index; renumbered at merge if needed."""

from django.db import migrations, models

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0049_changed_files_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="watermark",
            name="done_count",
            field=models.BigIntegerField(db_default=0, editable=False),
        ),
        migrations.AddField(
            model_name="watermark",
            name="done_weight",
            field=models.DecimalField(
                db_default=0, decimal_places=0, editable=False, max_digits=38
            ),
        ),
        RunSQLFile("0050_lag_on_watermark.sql"),
    ]
