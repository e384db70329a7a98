"""tidemark_reader: the role local meta tables are read as (no privilege on Tidemark's tables)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0018_refuse")]

    operations = [RunSQLFile("0020_sec_sql_reader_role.sql", reverse="noop")]
