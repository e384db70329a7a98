"""An incremental batch rewrites outputs in the sink whole: inventory/sql/0010_incremental_rewrites_whole.sql."""

from pathlib import Path

from django.db import migrations

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
_0008 = (SQL_DIR / "0008_exactly_once.sql").read_text()
# reversing puts back 0008's tidemark_acquire and drops the new function
REVERSE = (
    _0008[_0008.index("CREATE OR REPLACE FUNCTION tidemark_acquire(") :]
    + "\nDROP FUNCTION IF EXISTS tidemark_plan_incremental(bigint, text, bigint, bigint, bigint, integer);\n"
)


class Migration(migrations.Migration):
    dependencies = [("inventory", "0009_maintenance_run")]

    operations = [
        migrations.RunSQL((SQL_DIR / "0010_incremental_rewrites_whole.sql").read_text(), REVERSE)
    ]
