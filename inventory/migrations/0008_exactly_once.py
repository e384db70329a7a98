"""Exactly once across retry, replay and backfill: inventory/sql/0008_exactly_once.sql.

Each batch records which attempt's output is in the sink and which batch replaced it; the
publish fence, the planner's visibility horizon and the empty-hole step are SQL functions.
"""

from importlib import import_module
from pathlib import Path

import django.db.models.deletion
from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "sql" / "0008_exactly_once.sql"
_0002 = import_module("inventory.migrations.0002_plan_function")
# reversing puts back the definitions this replaces and drops the new functions
REVERSE = (
    _0002.PLAN
    + _0002.ACQUIRE
    + """
DROP FUNCTION IF EXISTS tidemark_incremental_next(bigint, text);
DROP FUNCTION IF EXISTS tidemark_publish_end(bigint, integer, bigint[]);
DROP FUNCTION IF EXISTS tidemark_publish_begin(bigint, integer);
"""
)


class Migration(migrations.Migration):
    dependencies = [("inventory", "0007_lock_order")]

    operations = [
        migrations.AddField(
            model_name="batch",
            name="published_attempt",
            field=models.PositiveSmallIntegerField(
                blank=True, help_text="the attempt whose output is in the sink", null=True
            ),
        ),
        migrations.AddField(
            model_name="batch",
            name="replaced_by",
            field=models.ForeignKey(
                blank=True,
                help_text="the batch whose output replaced this one's in the sink",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="replaced",
                to="inventory.batch",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(
                    ("published_attempt__isnull", False), ("replaced_by__isnull", True)
                ),
                fields=["job"],
                name="batch_live_output_idx",
            ),
        ),
        migrations.RunSQL(SQL.read_text(), REVERSE),
    ]
