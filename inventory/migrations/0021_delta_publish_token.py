"""Delta Lake (issue 22): tidemark_publish_token, a number per publish in publish order (the Delta
sink's txn version), and the `delta` connector kind."""

from django.db import migrations, models

from inventory.sql.migrations_utils import RunSQLFile

KINDS = ["files", "table", "kafka", "job_output", "delta"]


class Migration(migrations.Migration):
    dependencies = [("inventory", "0020_sec_sql_reader_role")]

    operations = [
        RunSQLFile("0021_publish_token.sql"),
        migrations.RemoveConstraint(model_name="connector", name="connector_kind_valid"),
        migrations.AlterField(
            model_name="connector",
            name="kind",
            field=models.CharField(
                choices=[(kind, kind.replace("_", " ")) for kind in KINDS], max_length=20
            ),
        ),
        migrations.AddConstraint(
            model_name="connector",
            constraint=models.CheckConstraint(
                condition=models.Q(kind__in=KINDS), name="connector_kind_valid"
            ),
        ),
    ]
