"""A job's lag and the connector's last asset below an id, each in one SQL function read by
asset_connector_id_idx whatever the planner's statistics (0034_lag_by_index.sql)."""

from django.db import migrations

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [("inventory", "0033_index_walks")]

    operations = [RunSQLFile("0034_lag_by_index.sql")]
