"""Tidemark's schema as of migration 0028 (main at caa5ddd), in one step: the models' tables,
indexes and constraints, then every SQL object (functions, triggers, the reader role, the publish
sequence) from the frozen file inventory/sql/migrations/0001_baseline.sql, then the role groups.

It replaces the old chain 0001_initial ... 0028_reaper_never_starved: a database migrated with that
chain is taken as already at this baseline; a new database runs it. Later changes are the next
numbered migrations, each applying one inventory/sql/migrations/NNNN_*.sql (inventory/sql/README.md).
"""

import django.contrib.postgres.constraints
import django.contrib.postgres.fields.ranges
import django.db.models.deletion
import django.db.models.functions.comparison
from django.db import migrations, models

from inventory.sql.migrations_utils import RunSQLFile

# The role groups and their admin-site model permissions, as the old chain's 0003 created them
# (inventory.roles.role_groups_ensure brings them up to date after every migrate).
_MODELS = (
    "connector",
    "asset",
    "job",
    "batch",
    "batchattempt",
    "backfill",
    "watermark",
    "watermarkevent",
)
_VIEW = {f"view_{model}" for model in _MODELS}
ROLE_PERMISSIONS = {
    "viewer": _VIEW,
    "operator": _VIEW,
    "admin": _VIEW
    | {
        f"{action}_{model}"
        for model in ("connector", "job")
        for action in ("add", "change", "delete")
    }
    | {"change_watermark"},
}


def create_roles(apps, schema_editor):
    # Permissions are normally created after all migrations ran; create them now so they can be
    # attached to the groups on a fresh database.
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(
            Permission.objects.filter(content_type__app_label="inventory", codename__in=codenames)
        )


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS).delete()


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("inventory", "0001_initial"),
        ("inventory", "0002_plan_function"),
        ("inventory", "0003_roles"),
        ("inventory", "0004_commit_functions"),
        ("inventory", "0005_plpgsql_start"),
        ("inventory", "0006_drop_unused_lookback"),
        ("inventory", "0007_lock_order"),
        ("inventory", "0008_exactly_once"),
        ("inventory", "0009_maintenance_run"),
        ("inventory", "0010_incremental_rewrites_whole"),
        ("inventory", "0011_dashboard"),
        ("inventory", "0012_sql_home"),
        ("inventory", "0013_asset_index_no_jit"),
        ("inventory", "0014_sources_core"),
        ("inventory", "0015_one_dispatch"),
        ("inventory", "0016_backfill_time_range"),
        ("inventory", "0017_rates_indexes"),
        ("inventory", "0018_refuse"),
        ("inventory", "0020_sec_sql_reader_role"),
        ("inventory", "0021_delta_publish_token"),
        ("inventory", "0023_dash_batch_plural"),
        ("inventory", "0024_watermark_boundaries"),
        ("inventory", "0025_one_overlap_rule"),
        ("inventory", "0026_restatements"),
        ("inventory", "0027_prefix_sums_rates"),
        ("inventory", "0028_reaper_never_starved"),
    ]

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="Backfill",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("range_start", models.BigIntegerField()),
                ("range_end", models.BigIntegerField()),
                ("batch_weight", models.BigIntegerField()),
                ("max_items", models.PositiveIntegerField()),
                ("max_concurrency", models.PositiveSmallIntegerField(default=1)),
                (
                    "priority",
                    models.SmallIntegerField(
                        default=0,
                        help_text="above 0 runs before incremental work, below 0 after it",
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "pending"),
                            ("running", "running"),
                            ("paused", "paused"),
                            ("completed", "completed"),
                            ("cancelled", "cancelled"),
                        ],
                        default="pending",
                        max_length=20,
                    ),
                ),
                ("reason", models.TextField(blank=True, default="")),
                (
                    "requested",
                    models.JSONField(
                        blank=True,
                        help_text='the time (or column value) range the ids were resolved from: {"by", "basis", "start", "end"}; null when given by ids',
                        null=True,
                    ),
                ),
                ("created_by", models.CharField(blank=True, default="", max_length=150)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="MaintenanceRun",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("last_run_at", models.DateTimeField()),
                ("outcome", models.JSONField(blank=True, default=dict)),
            ],
        ),
        migrations.CreateModel(
            name="Connector",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.SlugField(max_length=100)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("files", "files"),
                            ("table", "table"),
                            ("kafka", "kafka"),
                            ("job_output", "job output"),
                            ("delta", "delta"),
                        ],
                        max_length=20,
                    ),
                ),
                ("labels", models.JSONField(blank=True, default=list)),
                ("config", models.JSONField(blank=True, default=dict)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("active", "active"),
                            ("paused", "paused"),
                            ("waiting", "waiting"),
                            ("completed", "completed"),
                        ],
                        default="active",
                        max_length=20,
                    ),
                ),
                ("start_after", models.CharField(blank=True, default="", max_length=100)),
                ("cursor", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "ordering": ["name"],
                "constraints": [
                    models.UniqueConstraint(fields=("name",), name="connector_name_unique"),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("kind__in", ["files", "table", "kafka", "job_output", "delta"])
                        ),
                        name="connector_kind_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("state__in", ["active", "paused", "waiting", "completed"])
                        ),
                        name="connector_state_valid",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.SlugField(max_length=100)),
                ("processor", models.CharField(default="passthrough", max_length=100)),
                ("params", models.JSONField(blank=True, default=dict)),
                ("sink", models.JSONField(blank=True, default=dict)),
                (
                    "watermark_type",
                    models.CharField(
                        choices=[
                            ("int", "int"),
                            ("datetime", "datetime"),
                            ("key_value", "key/value"),
                            ("file_set", "file set"),
                        ],
                        default="int",
                        max_length=20,
                    ),
                ),
                ("batch_weight", models.BigIntegerField(help_text="weight budget of one batch")),
                (
                    "max_items",
                    models.PositiveIntegerField(default=1000, help_text="item cap of one batch"),
                ),
                ("max_attempts", models.PositiveSmallIntegerField(default=3)),
                ("retry_backoff_seconds", models.PositiveIntegerField(default=30)),
                ("lease_seconds", models.PositiveIntegerField(default=120)),
                ("schedule_seconds", models.PositiveIntegerField(blank=True, null=True)),
                ("schedule_cron", models.CharField(blank=True, default="", max_length=100)),
                ("max_concurrency", models.PositiveSmallIntegerField(default=1)),
                ("executor", models.CharField(default="warm", max_length=20)),
                (
                    "start_position",
                    models.BigIntegerField(default=0, help_text="first item id this job considers"),
                ),
                (
                    "lookback",
                    models.BigIntegerField(
                        default=0,
                        help_text="late data: every batch of a table source also re-reads this much before its range (seconds for a timestamp column, values for an integer column); the sink's upsert removes the duplicates",
                    ),
                ),
                (
                    "restatements",
                    models.CharField(
                        choices=[
                            ("automatic", "automatic (rebuild at once)"),
                            ("proposed", "proposed (an operator applies it)"),
                        ],
                        default="automatic",
                        help_text="when input this job already committed changes: rebuild the affected outputs at once (automatic), or record a proposed replay for an operator to apply (proposed)",
                        max_length=20,
                    ),
                ),
                ("paused", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "connector",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="jobs",
                        to="inventory.connector",
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="Batch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("incremental", "incremental"), ("backfill", "backfill")],
                        max_length=20,
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "queued"),
                            ("running", "running"),
                            ("succeeded", "succeeded"),
                            ("failed", "failed"),
                            ("dead", "dead"),
                            ("skipped", "skipped"),
                            ("cancelled", "cancelled"),
                            ("superseded", "superseded (replayed)"),
                        ],
                        max_length=20,
                    ),
                ),
                ("span", django.contrib.postgres.fields.ranges.BigIntegerRangeField()),
                ("item_count", models.PositiveIntegerField()),
                ("weight", models.BigIntegerField()),
                ("attempt", models.PositiveSmallIntegerField(default=0)),
                ("max_attempts", models.PositiveSmallIntegerField()),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("worker", models.CharField(blank=True, default="", max_length=200)),
                ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("result", models.JSONField(blank=True, default=dict)),
                (
                    "watermark_value",
                    models.JSONField(
                        blank=True,
                        help_text="source-derived watermark reported on success",
                        null=True,
                    ),
                ),
                ("error", models.JSONField(blank=True, default=dict)),
                ("skip_reason", models.TextField(blank=True, default="")),
                ("config_snapshot", models.JSONField(blank=True, default=dict)),
                (
                    "published_attempt",
                    models.PositiveSmallIntegerField(
                        blank=True, help_text="the attempt whose output is in the sink", null=True
                    ),
                ),
                ("commit_seq", models.BigIntegerField(blank=True, null=True)),
                (
                    "backfill",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="batches",
                        to="inventory.backfill",
                    ),
                ),
                (
                    "replaced_by",
                    models.ForeignKey(
                        blank=True,
                        help_text="the batch whose output replaced this one's in the sink",
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="replaced",
                        to="inventory.batch",
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="batches",
                        to="inventory.job",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "batches",
                "ordering": ["-id"],
            },
        ),
        migrations.AddField(
            model_name="backfill",
            name="job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="backfills",
                to="inventory.job",
            ),
        ),
        migrations.CreateModel(
            name="AttemptRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("outcome", models.CharField(blank=True, default="", max_length=20)),
                ("count", models.BigIntegerField(default=0)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="inventory.job",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="JobHourlyRates",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("succeeded", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("items", models.BigIntegerField(default=0)),
                ("weight", models.DecimalField(decimal_places=0, default=0, max_digits=38)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="inventory.job",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Restatement",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "cause",
                    models.CharField(
                        choices=[
                            ("late_rows", "late rows in a table slice"),
                            ("changed_files", "files changed after registration"),
                            ("changed_objects", "objects whose ETag changed"),
                            ("upstream", "upstream commits replaced"),
                            (
                                "delta_versions",
                                "Delta versions whose files a later version removed",
                            ),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "pending (a batch over the items is running)"),
                            ("proposed", "proposed (waits for an operator)"),
                            ("applied", "applied (its backfill rebuilds the outputs)"),
                            ("dismissed", "dismissed"),
                        ],
                        max_length=20,
                    ),
                ),
                ("range_start", models.BigIntegerField()),
                ("range_end", models.BigIntegerField()),
                ("priority", models.SmallIntegerField(default=0)),
                ("reason", models.TextField()),
                (
                    "detail",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="the source of the restatement (items, commits)",
                    ),
                ),
                (
                    "preview",
                    models.JSONField(
                        blank=True,
                        help_text="the backfill plan proposed, with its fingerprint",
                        null=True,
                    ),
                ),
                ("decided_by", models.CharField(blank=True, default="", max_length=150)),
                ("decided_at", models.DateTimeField(blank=True, null=True)),
                ("dismiss_reason", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "backfill",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="restatements",
                        to="inventory.backfill",
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="restatement_records",
                        to="inventory.job",
                    ),
                ),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="Watermark",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "type",
                    models.CharField(
                        choices=[
                            ("int", "int"),
                            ("datetime", "datetime"),
                            ("key_value", "key/value"),
                            ("file_set", "file set"),
                        ],
                        max_length=20,
                    ),
                ),
                ("position", models.BigIntegerField()),
                ("value", models.JSONField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="watermark",
                        to="inventory.job",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="WatermarkEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("old_position", models.BigIntegerField()),
                ("new_position", models.BigIntegerField()),
                ("old_value", models.JSONField(blank=True, null=True)),
                ("new_value", models.JSONField(blank=True, null=True)),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("batch", "batch"),
                            ("admin", "admin"),
                            ("api", "api"),
                            ("system", "system"),
                        ],
                        max_length=20,
                    ),
                ),
                ("actor", models.CharField(blank=True, default="", max_length=150)),
                ("reason", models.TextField(blank=True, default="")),
                ("is_replay", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "batch",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to="inventory.batch",
                    ),
                ),
                (
                    "watermark",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="inventory.watermark",
                    ),
                ),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="BatchAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveSmallIntegerField()),
                ("worker", models.CharField(blank=True, default="", max_length=200)),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("outcome", models.CharField(blank=True, default="", max_length=20)),
                ("error", models.JSONField(blank=True, default=dict)),
                (
                    "batch",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempts",
                        to="inventory.batch",
                    ),
                ),
            ],
            options={
                "ordering": ["batch", "number"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("finished_at__isnull", False)),
                        fields=["finished_at"],
                        name="attempt_finished_idx",
                    ),
                    models.Index(
                        condition=models.Q(("outcome__in", ["", "succeeded"]), _negated=True),
                        fields=["finished_at"],
                        name="attempt_failed_finished_idx",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("batch", "number"), name="attempt_batch_number_unique"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="BackfillThrottle",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("weight_per_minute", models.BigIntegerField()),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "connector",
                    models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="throttle",
                        to="inventory.connector",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("connector",),
                        name="backfill_throttle_one_per_scope",
                        nulls_distinct=False,
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("weight_per_minute__gt", 0)),
                        name="backfill_throttle_positive",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Asset",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("location", models.TextField()),
                ("weight", models.BigIntegerField()),
                ("discovered_at", models.DateTimeField(auto_now_add=True)),
                ("extra", models.JSONField(blank=True, default=dict)),
                ("cum_count", models.BigIntegerField(editable=False, null=True)),
                (
                    "cum_weight",
                    models.DecimalField(decimal_places=0, editable=False, max_digits=38, null=True),
                ),
                (
                    "connector",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="assets",
                        to="inventory.connector",
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
                "indexes": [
                    models.Index(fields=["connector", "id"], name="asset_connector_id_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("connector", "location"), name="asset_connector_location_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("weight__gte", 0)), name="asset_weight_non_negative"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ConnectorEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "old_state",
                    models.CharField(
                        choices=[
                            ("active", "active"),
                            ("paused", "paused"),
                            ("waiting", "waiting"),
                            ("completed", "completed"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "new_state",
                    models.CharField(
                        choices=[
                            ("active", "active"),
                            ("paused", "paused"),
                            ("waiting", "waiting"),
                            ("completed", "completed"),
                        ],
                        max_length=20,
                    ),
                ),
                ("actor", models.CharField(blank=True, default="", max_length=150)),
                ("reason", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "connector",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="inventory.connector",
                    ),
                ),
            ],
            options={
                "ordering": ["-id"],
                "indexes": [
                    models.Index(fields=["connector", "-id"], name="connector_event_history_idx")
                ],
            },
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(fields=("name",), name="job_name_unique"),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("restatements__in", ["automatic", "proposed"])),
                name="job_restatements_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("batch_weight__gt", 0)), name="job_batch_weight_positive"
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("max_items__gt", 0)), name="job_max_items_positive"
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("max_attempts__gt", 0)), name="job_max_attempts_positive"
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("watermark_type__in", ["int", "datetime", "key_value", "file_set"])
                ),
                name="job_watermark_type_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(fields=["job", "status"], name="batch_job_status_idx"),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                models.F("job"),
                models.Func(
                    models.F("span"), function="upper", output_field=models.BigIntegerField()
                ),
                condition=models.Q(("backfill__isnull", True)),
                name="batch_incremental_upper_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("status", "running")),
                fields=["lease_expires_at"],
                name="batch_running_lease_idx",
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
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("status__in", ["queued", "running", "failed", "dead"])),
                fields=["status", "job"],
                name="batch_open_status_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                models.F("job"),
                models.Func(
                    models.F("span"), function="lower", output_field=models.BigIntegerField()
                ),
                name="batch_job_lower_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(fields=["job", "-id"], name="batch_job_recent_idx"),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", False)),
                fields=["finished_at"],
                name="batch_finished_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("status", "succeeded")),
                fields=["job", "finished_at"],
                name="batch_job_succeeded_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "queued",
                            "running",
                            "succeeded",
                            "failed",
                            "dead",
                            "skipped",
                            "cancelled",
                            "superseded",
                        ],
                    )
                ),
                name="batch_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["incremental", "backfill"])),
                name="batch_kind_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("backfill__isnull", False), ("kind", "backfill")),
                    models.Q(("backfill__isnull", True), ("kind", "incremental")),
                    _connector="OR",
                ),
                name="batch_backfill_matches_kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(("span__isempty", False)), name="batch_span_not_empty"
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.UniqueConstraint(
                condition=models.Q(("commit_seq__isnull", False)),
                fields=("job", "commit_seq"),
                name="batch_commit_seq_unique",
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(("weight__gte", 0)), name="batch_weight_non_negative"
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "running"), _negated=True),
                    ("lease_expires_at__isnull", False),
                    _connector="OR",
                ),
                name="batch_running_has_lease",
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "skipped"), _negated=True),
                    models.Q(("skip_reason", ""), _negated=True),
                    _connector="OR",
                ),
                name="batch_skipped_has_reason",
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=django.contrib.postgres.constraints.ExclusionConstraint(
                condition=models.Q(
                    ("status__in", ("queued", "running", "succeeded", "failed", "dead", "skipped"))
                ),
                expressions=[
                    (
                        models.Func(
                            models.F("job_id"),
                            models.F("job_id"),
                            models.Value("[]"),
                            function="int8range",
                        ),
                        "&&",
                    ),
                    (
                        models.Func(
                            django.db.models.functions.comparison.Coalesce(
                                models.F("backfill_id"), models.Value(0)
                            ),
                            django.db.models.functions.comparison.Coalesce(
                                models.F("backfill_id"), models.Value(0)
                            ),
                            models.Value("[]"),
                            function="int8range",
                        ),
                        "&&",
                    ),
                    (models.F("span"), "&&"),
                ],
                name="batch_no_overlap_per_job_lane",
            ),
        ),
        migrations.AddConstraint(
            model_name="backfill",
            constraint=models.CheckConstraint(
                condition=models.Q(("range_end__gte", models.F("range_start"))),
                name="backfill_range_ordered",
            ),
        ),
        migrations.AddConstraint(
            model_name="backfill",
            constraint=models.CheckConstraint(
                condition=models.Q(("batch_weight__gt", 0)), name="backfill_batch_weight_positive"
            ),
        ),
        migrations.AddConstraint(
            model_name="backfill",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", ["pending", "running", "paused", "completed", "cancelled"])
                ),
                name="backfill_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="attemptrollup",
            constraint=models.UniqueConstraint(
                fields=("job", "outcome"), name="attempt_rollup_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="jobhourlyrates",
            constraint=models.UniqueConstraint(
                fields=("job", "hour"), name="job_hourly_rates_unique"
            ),
        ),
        migrations.AddIndex(
            model_name="restatement",
            index=models.Index(fields=["job", "-id"], name="restatement_job_recent_idx"),
        ),
        migrations.AddConstraint(
            model_name="restatement",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "cause__in",
                        [
                            "late_rows",
                            "changed_files",
                            "changed_objects",
                            "upstream",
                            "delta_versions",
                        ],
                    )
                ),
                name="restatement_cause_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="restatement",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["pending", "proposed", "applied", "dismissed"])),
                name="restatement_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="restatement",
            constraint=models.CheckConstraint(
                condition=models.Q(("range_end__gte", models.F("range_start"))),
                name="restatement_range_ordered",
            ),
        ),
        migrations.AddConstraint(
            model_name="restatement",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "dismissed"), _negated=True),
                    models.Q(("dismiss_reason", ""), _negated=True),
                    _connector="OR",
                ),
                name="restatement_dismissed_has_reason",
            ),
        ),
        migrations.AddConstraint(
            model_name="watermark",
            constraint=models.UniqueConstraint(fields=("job",), name="watermark_one_per_job"),
        ),
        migrations.AddConstraint(
            model_name="watermark",
            constraint=models.CheckConstraint(
                condition=models.Q(("type__in", ["int", "datetime", "key_value", "file_set"])),
                name="watermark_type_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="watermarkevent",
            index=models.Index(fields=["watermark", "-id"], name="wm_event_history_idx"),
        ),
        # every SQL object, after the tables it reads (reversing drops the tables and their triggers)
        RunSQLFile("0001_baseline.sql", reverse="noop"),
        migrations.RunPython(create_roles, remove_roles),
    ]
