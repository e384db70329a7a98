"""Watermark.job had two unique indexes on job_id: the OneToOneField's own and the named
watermark_one_per_job. One is enough; every watermark write paid for both."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0036_lag_outside_rule"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="watermark",
            name="watermark_one_per_job",
        ),
    ]
