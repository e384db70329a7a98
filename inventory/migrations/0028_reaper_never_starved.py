"""The reaper is never starved: acquire takes over its job's expired leases, the reaper waits for the job."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0027_prefix_sums_rates")]

    operations = [RunSQLFile("0028_reaper_never_starved.sql")]
