"""Backfills' shapes: a plan (item ids or times), its preview and its progress."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory import selectors_backfills
from inventory.api.serializers.connectors import WEIGHT_UNIT_HELP
from inventory.api.serializers.strict import Input
from inventory.bounds import BIGINT, INT, SMALLINT
from inventory.models import Backfill, Job
from inventory.services.reasons import REASON_MAX


class BackfillProgressSerializer(serializers.Serializer):
    batches_total = serializers.IntegerField()
    batches_done = serializers.IntegerField(help_text="succeeded or skipped")
    batches_running = serializers.IntegerField()
    batches_dead = serializers.IntegerField()
    batches_cancelled = serializers.IntegerField()
    weight_total = serializers.IntegerField()
    weight_done = serializers.IntegerField()
    percent = serializers.FloatField(help_text="weight done / weight total, 0-100")
    eta_seconds = serializers.FloatField(
        allow_null=True,
        help_text="how long the batches left should take, by the same estimate as the preview's "
        "estimated_seconds (0 when none is left; null when the job has no succeeded batch to "
        "judge by and no throttle applies)",
    )


class BackfillSerializer(serializers.ModelSerializer):
    job = serializers.SlugRelatedField(read_only=True, slug_field="name")
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Backfill
        fields = [
            "id",
            "job",
            "range_start",
            "range_end",
            "batch_weight",
            "max_items",
            "max_concurrency",
            "priority",
            "status",
            "reason",
            "requested",
            "created_by",
            "created_at",
            "updated_at",
            "progress",
        ]
        read_only_fields = fields

    @extend_schema_field(BackfillProgressSerializer)
    def get_progress(self, backfill) -> dict:
        total = backfill.weight_total
        return {
            "batches_total": backfill.batches_total,
            "batches_done": backfill.batches_done,
            "batches_running": backfill.batches_running,
            "batches_dead": backfill.batches_dead,
            "batches_cancelled": backfill.batches_cancelled,
            "weight_total": total,
            "weight_done": backfill.weight_done,
            "percent": round(100.0 * backfill.weight_done / total, 2) if total else 100.0,
            "eta_seconds": _seconds(_eta(backfill)),
        }


def _eta(backfill):
    if not hasattr(backfill, "eta"):  # one backfill; a page has them set at once (with_etas)
        selectors_backfills.with_etas([backfill])
    return backfill.eta


def _seconds(duration) -> float | None:
    return None if duration is None else duration.total_seconds()


@extend_schema_field({"oneOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]})
class TimeOrValueField(serializers.Field):
    """An ISO 8601 time with a UTC offset, or an integer for a table read by an integer column;
    what it means is the job's source's business (backfills.backfill_range_for_times)."""

    default_error_messages = {
        "invalid": "must be an ISO 8601 time with a UTC offset (an integer for a table "
        "connector read by an integer column)"
    }

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class BackfillPlanSerializer(Input):
    """A closed range of a job, by item ids or by time (exactly one of the two pairs), and the
    batch budget to cover it with."""

    job = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Job.objects.all(),
        error_messages={"does_not_exist": "there is no job named '{value}'"},
    )
    range_start = serializers.IntegerField(
        min_value=-BIGINT, max_value=BIGINT, required=False, help_text="first item id"
    )
    range_end = serializers.IntegerField(
        min_value=-BIGINT, max_value=BIGINT - 1, required=False, help_text="last item id"
    )
    time_start = TimeOrValueField(
        required=False,
        help_text="instead of the ids: the first time, ISO 8601 with a UTC offset (table "
        "connectors: the read column's value; files: registration time; job_output: commit "
        "time). An integer for a table read by an integer column",
    )
    time_end = TimeOrValueField(required=False, help_text="the last time (inclusive)")
    batch_weight = serializers.IntegerField(
        min_value=1, max_value=BIGINT, required=False, help_text="default: the job's"
    )
    max_items = serializers.IntegerField(
        min_value=1, max_value=INT, required=False, help_text="default: the job's"
    )

    def validate(self, attrs):
        # which pair, and that it is whole: backfills.backfill_range (the dashboard's rule too)
        if "range_start" in attrs and "range_end" in attrs:
            if attrs["range_end"] < attrs["range_start"]:
                raise serializers.ValidationError(
                    {"range_end": ["must not be before range_start (the range is inclusive)"]}
                )
        return attrs


class BackfillPreviewRequestSerializer(BackfillPlanSerializer):
    """A plan to preview, and how many of its batches would run at once (for its duration)."""

    max_concurrency = serializers.IntegerField(
        min_value=1, max_value=SMALLINT, default=1, help_text="for the estimated duration"
    )


class BackfillCreateSerializer(BackfillPlanSerializer):
    max_concurrency = serializers.IntegerField(min_value=1, max_value=SMALLINT, default=1)
    priority = serializers.IntegerField(
        min_value=-SMALLINT - 1,
        max_value=SMALLINT,
        default=0,
        help_text="above 0 runs before incremental work, below 0 after it",
    )
    reason = serializers.CharField(
        max_length=REASON_MAX, required=False, allow_blank=True, default=""
    )
    fingerprint = serializers.RegexField(
        r"^[0-9a-f]{16}$",
        required=False,
        help_text="a preview's fingerprint: run exactly that plan, or 409 if it changed",
    )


class PlannedBatchSerializer(serializers.Serializer):
    range_start = serializers.IntegerField()
    range_end = serializers.IntegerField()
    first_item = serializers.IntegerField(
        allow_null=True,
        help_text="the first item id the batch holds (its range may start before it)",
    )
    last_item = serializers.IntegerField(allow_null=True, help_text="the last item id it holds")
    item_count = serializers.IntegerField()
    weight = serializers.IntegerField()


class BackfillRequestedSerializer(serializers.Serializer):
    by = serializers.ChoiceField(choices=["time", "value"])
    basis = serializers.CharField(help_text="what was compared, e.g. 'column updated_at'")
    start = TimeOrValueField()
    end = TimeOrValueField()


class BackfillPreviewSerializer(serializers.Serializer):
    job = serializers.CharField()
    range_start = serializers.IntegerField(help_text="the first item id (resolved from a time)")
    range_end = serializers.IntegerField(help_text="the last item id")
    requested = BackfillRequestedSerializer(
        allow_null=True, help_text="the time range the ids came from; null when given by ids"
    )
    batch_count = serializers.IntegerField()
    total_items = serializers.IntegerField()
    total_weight = serializers.IntegerField()
    weight_unit = serializers.CharField(help_text=WEIGHT_UNIT_HELP)
    fingerprint = serializers.CharField(
        help_text="names this exact plan: give it when creating the backfill to run exactly it"
    )
    estimated_seconds = serializers.FloatField(
        allow_null=True,
        help_text="how long the plan should take at max_concurrency: waves of batches, each as "
        "long as the job's recent succeeded batches took (median), no faster than the shared "
        "throttle; null when there is neither a batch to judge by nor a throttle",
    )
    batches = PlannedBatchSerializer(many=True)
