"""Freshness targets on jobs, the freshness controller's row and its decisions; acquire applies
the controller's rate and concurrency cap (0045_freshness_throttle.sql, docs/throttle.md)."""

from django.db import migrations, models

from inventory.sql.migrations_utils import RunSQLFile


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0044_iceberg_connector_kind"),
    ]

    operations = [
        migrations.CreateModel(
            name="FreshnessThrottle",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "enabled",
                    models.BooleanField(
                        default=True,
                        help_text="adjust the backfills' rate to the live jobs' freshness targets",
                    ),
                ),
                (
                    "rate",
                    models.BigIntegerField(
                        blank=True,
                        help_text="weight per minute, all backfills; empty: no limit",
                        null=True,
                    ),
                ),
                (
                    "concurrency",
                    models.PositiveSmallIntegerField(
                        blank=True,
                        help_text="running batches per backfill; empty: no cap",
                        null=True,
                    ),
                ),
                (
                    "reference_rate",
                    models.BigIntegerField(
                        blank=True,
                        help_text="the backfills' weight per minute when last unthrottled",
                        null=True,
                    ),
                ),
                (
                    "pinned_rate",
                    models.BigIntegerField(
                        blank=True,
                        help_text="a person's rate, weight per minute, used instead",
                        null=True,
                    ),
                ),
                ("pinned_by", models.CharField(blank=True, default="", max_length=150)),
                ("pinned_at", models.DateTimeField(blank=True, null=True)),
                (
                    "increase_fraction",
                    models.FloatField(
                        default=0.1,
                        help_text="each step inside the targets adds this share of the reference",
                    ),
                ),
                (
                    "decrease_factor",
                    models.FloatField(
                        default=0.5,
                        help_text="each step with a target missed multiplies the rate by this",
                    ),
                ),
                (
                    "floor_fraction",
                    models.FloatField(
                        default=0.05,
                        help_text="the rate never goes below this share of the reference",
                    ),
                ),
                (
                    "slow_above",
                    models.FloatField(
                        default=0.5,
                        help_text="slow down once a live job uses more than this share of its target",
                    ),
                ),
                (
                    "speed_below",
                    models.FloatField(
                        default=0.25,
                        help_text="speed up only while every live job uses at most this share",
                    ),
                ),
                (
                    "interval_seconds",
                    models.PositiveIntegerField(
                        default=10, help_text="the least time between two steps of the controller"
                    ),
                ),
                ("stepped_at", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name="ThrottleDecision",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("old_rate", models.BigIntegerField(blank=True, null=True)),
                ("new_rate", models.BigIntegerField(blank=True, null=True)),
                ("old_concurrency", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("new_concurrency", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("reason", models.TextField()),
                (
                    "missing",
                    models.JSONField(
                        blank=True, default=list, help_text="jobs missing their target"
                    ),
                ),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="freshness_target_items",
            field=models.BigIntegerField(
                blank=True,
                help_text="freshness target: at most this many items not committed yet",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="freshness_target_seconds",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="freshness target: the oldest item not committed yet is at most this old",
                null=True,
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("freshness_target_seconds__isnull", True),
                    ("freshness_target_seconds__gt", 0),
                    _connector="OR",
                ),
                name="job_freshness_seconds_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("freshness_target_items__isnull", True),
                    ("freshness_target_items__gte", 0),
                    _connector="OR",
                ),
                name="job_freshness_items_not_negative",
            ),
        ),
        migrations.AddConstraint(
            model_name="freshnessthrottle",
            constraint=models.CheckConstraint(
                condition=models.Q(("id", 1)), name="freshness_throttle_one_row"
            ),
        ),
        migrations.AddConstraint(
            model_name="freshnessthrottle",
            constraint=models.CheckConstraint(
                condition=models.Q(("rate__isnull", True), ("rate__gt", 0), _connector="OR"),
                name="freshness_rate_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="freshnessthrottle",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("pinned_rate__isnull", True), ("pinned_rate__gt", 0), _connector="OR"
                ),
                name="freshness_pinned_rate_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="freshnessthrottle",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("concurrency__isnull", True), ("concurrency__gt", 0), _connector="OR"
                ),
                name="freshness_concurrency_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="freshnessthrottle",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("increase_fraction__gt", 0),
                    ("decrease_factor__gt", 0),
                    ("decrease_factor__lt", 1),
                    ("floor_fraction__gte", 0),
                    ("floor_fraction__lt", 1),
                    ("speed_below__gt", 0),
                    ("slow_above__gte", models.F("speed_below")),
                    ("slow_above__lte", 1),
                ),
                name="freshness_factors_valid",
            ),
        ),
        RunSQLFile("0045_freshness_throttle.sql"),
    ]
