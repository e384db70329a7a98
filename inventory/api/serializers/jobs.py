"""Jobs' shapes, their watermarks and watermark events, a run's result."""

from rest_framework import serializers

from inventory.api.serializers.connectors import WEIGHT_UNIT_HELP
from inventory.api.serializers.fields import AnyJSONField, PublicJSONField
from inventory.api.serializers.retention import RetentionForecastSerializer
from inventory.api.serializers.strict import Input, KnownFieldsOnly
from inventory.bounds import BIGINT
from inventory.models import Connector, ConnectorEvent, Job, Watermark, WatermarkEvent
from inventory.services.jobs import FIXED_JOB_FIELDS, JOB_SETTINGS
from inventory.services.reasons import REASON_MAX


class WatermarkSerializer(serializers.ModelSerializer):
    value = AnyJSONField(allow_null=True, help_text="typed high-water mark (null: nothing yet)")

    class Meta:
        model = Watermark
        fields = ["type", "position", "value", "updated_at"]
        read_only_fields = fields


class LagSerializer(serializers.Serializer):
    items = serializers.IntegerField(help_text="items at or after the watermark")
    weight = serializers.IntegerField(help_text="their summed weight")


class BlockerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    range_start = serializers.IntegerField(source="first_item")
    range_end = serializers.IntegerField(source="last_item")


class WatermarkStateSerializer(WatermarkSerializer):
    job = serializers.CharField(source="job.name")
    lag = LagSerializer(allow_null=True, help_text="null when the items cannot be read now")
    blocked_by = BlockerSerializer(
        allow_null=True, help_text="the uncommitted batch the watermark waits for"
    )
    skipped_items = serializers.IntegerField(
        help_text="items below the watermark in skipped ranges (never processed; the gap "
        "report lists the ranges)"
    )

    class Meta(WatermarkSerializer.Meta):
        fields = ["job", *WatermarkSerializer.Meta.fields, "lag", "blocked_by", "skipped_items"]
        read_only_fields = fields


class WatermarkCorrectionSerializer(Input):
    value = AnyJSONField(
        required=False,
        allow_null=True,
        help_text="the new value; for an int watermark the last committed item id (give it or "
        "`position`); for other types leave it out to take the value of the committed batches "
        "below `position`",
    )
    position = serializers.IntegerField(
        required=False, min_value=-BIGINT, max_value=BIGINT, help_text="non-int watermarks only"
    )
    reason = serializers.CharField(max_length=REASON_MAX)
    replay = serializers.BooleanField(
        default=False, help_text="confirm moving the watermark backwards (items are reprocessed)"
    )
    skip_unseen = serializers.BooleanField(
        default=False,
        help_text="confirm moving the watermark forward past the job's last known item: items "
        "that arrive later with ids in that range are skipped (listed in the gap report)",
    )


class ConnectorEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = ConnectorEvent
        fields = ["id", "old_state", "new_state", "actor", "reason", "created_at"]
        read_only_fields = fields


class WatermarkEventSerializer(serializers.ModelSerializer):
    old_value = AnyJSONField(allow_null=True)
    new_value = AnyJSONField(allow_null=True)

    class Meta:
        model = WatermarkEvent
        fields = [
            "id",
            "old_position",
            "new_position",
            "old_value",
            "new_value",
            "source",
            "batch",
            "actor",
            "reason",
            "is_replay",
            "created_at",
        ]
        read_only_fields = fields


class JobSerializer(serializers.ModelSerializer):
    connector = serializers.SlugRelatedField(read_only=True, slug_field="name")
    params = PublicJSONField()
    sink = PublicJSONField()
    watermark = WatermarkSerializer(read_only=True)
    weight_unit = serializers.CharField(
        source="connector.weight_unit", read_only=True, help_text=WEIGHT_UNIT_HELP
    )

    class Meta:
        model = Job
        fields = [
            "name",
            "connector",
            "weight_unit",
            "watermark_type",
            "start_position",
            *JOB_SETTINGS,
            "watermark",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class JobListSerializer(JobSerializer):
    """A job in the list: its settings with its state and lag, as the overview shows them."""

    state = serializers.CharField(
        help_text="the overview's state: blocked, late, failing, unreadable, connector (its "
        "connector is paused or waiting), paused, catching_up or current"
    )
    lag = LagSerializer(allow_null=True, help_text="null when the items cannot be read now")
    time_lag_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="how far a datetime watermark's source time is behind now; null for others",
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "state", "lag", "time_lag_seconds"]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    lag = LagSerializer(allow_null=True, help_text="null when the items cannot be read now")
    blocked_by = BlockerSerializer(allow_null=True)
    batch_counts = serializers.DictField(child=serializers.IntegerField())
    retention_forecast = RetentionForecastSerializer(
        read_only=True,
        allow_null=True,
        help_text="when retention overtakes the job at the current rates (beat refreshes it "
        "every minute); null for a job whose source keeps its data, or not forecast yet",
    )

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields,
            "lag",
            "blocked_by",
            "batch_counts",
            "retention_forecast",
        ]
        read_only_fields = fields


class JobWriteSerializer(KnownFieldsOnly, serializers.ModelSerializer):
    """A job's settings, each checked against the bounds the database keeps (a 400 naming the field
    rather than a refusal from the database)."""

    connector = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Connector.objects.all(),
        # the words every other "no such name" answer uses (views/base.NamedViewSet)
        error_messages={"does_not_exist": "there is no connector named '{value}'"},
    )
    params = serializers.DictField(required=False)
    sink = serializers.DictField(required=False)

    class Meta:
        model = Job
        fields = [*FIXED_JOB_FIELDS, *JOB_SETTINGS]
        # the minimums services/jobs.py and job_config.py enforce, so the schema states them (the
        # model's columns alone would say 0, or any bigint)
        extra_kwargs = {
            "batch_weight": {"min_value": 1},
            "max_items": {"min_value": 1},
            "max_attempts": {"min_value": 1},
            "lease_seconds": {"min_value": 1},
            "schedule_seconds": {"min_value": 1},
            "max_concurrency": {"min_value": 1},
            "lookback": {"min_value": 0},
            "freshness_target_seconds": {"min_value": 1},
            "freshness_target_items": {"min_value": 0},
        }

    def validate_name(self, value):
        if self.instance is None and Job.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"a job named {value!r} already exists")
        return value


class RunResultSerializer(serializers.Serializer):
    job = serializers.CharField()
    planned = serializers.ListField(child=serializers.IntegerField())
    dispatched = serializers.ListField(child=serializers.IntegerField())
    reason = serializers.CharField(allow_blank=True, help_text="why nothing was planned, if so")
