"""tidemark_publish_token: a number per publish, in publish order (the Delta sink's txn version)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0018_refuse")]

    operations = [RunSQLFile("0021_publish_token.sql")]
