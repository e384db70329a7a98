"""One dispatch policy: acquire with a limit, the backfill throttle and pace in SQL."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0014_sources_core")]

    operations = [RunSQLFile("0015_one_dispatch.sql")]
