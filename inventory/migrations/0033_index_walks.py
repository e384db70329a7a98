"""The watermark advance and the next incremental start search by index (0033_index_walks.sql): a
commit's and an acquire's cost no longer grow with the batches waiting behind a running one. The
start's search of the few batches that left the holding statuses has an index of its own."""

from django.db import migrations, models

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0032_batch_indexes")]

    operations = [
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                models.F("job"),
                models.Func(
                    models.F("span"), function="upper", output_field=models.BigIntegerField()
                ),
                condition=models.Q(
                    ("backfill__isnull", True),
                    models.Q(
                        (
                            "status__in",
                            ("queued", "running", "succeeded", "failed", "dead", "skipped"),
                        ),
                        _negated=True,
                    ),
                ),
                name="batch_gone_upper_idx",
            ),
        ),
        RunSQLFile("0033_index_walks.sql"),
    ]
