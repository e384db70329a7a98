"""One owner per status transition (the move tables and the functions that write a status), and one incremental planner."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0001_baseline")]

    operations = [RunSQLFile("0029_one_transition_owner.sql")]
