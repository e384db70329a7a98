"""tidemark_refuse: an item query stops a planner with the source's own message."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0017_rates_indexes")]

    operations = [RunSQLFile("0018_refuse.sql")]
