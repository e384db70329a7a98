"""Status lists and "due" as SQL functions; every function re-created from inventory/sql/schema/."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0011_dashboard")]

    # reversing leaves these definitions in place: they do what the ones they replace did
    operations = [RunSQLFile("0012_sql_home.sql", reverse="noop")]
