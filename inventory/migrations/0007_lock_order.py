"""One lock order (job -> watermark -> backfill -> batch): inventory/sql/0007_lock_order.sql."""

from importlib import import_module
from pathlib import Path

from django.db import migrations

SQL = Path(__file__).resolve().parent.parent / "sql" / "0007_lock_order.sql"
# reversing puts back the definitions this replaces
_previous = (
    import_module("inventory.migrations.0004_commit_functions").SUCCEED
    + import_module("inventory.migrations.0005_plpgsql_start").CLAIM_BACKFILL
)


class Migration(migrations.Migration):
    dependencies = [("inventory", "0006_drop_unused_lookback")]

    operations = [migrations.RunSQL(SQL.read_text(), _previous)]
