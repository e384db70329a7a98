"""API views for the dashboard's questions: alerts, a job's gaps, backfilling the holes."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from inventory import selectors_alerts, selectors_backfills
from inventory.actions import role_of, run
from inventory.api.serializers.strict import Input
from inventory.bounds import BIGINT, INT, SMALLINT
from inventory.models import Connector, Job
from inventory.roles import actor_name
from inventory.selectors_coverage import (
    holes_to_backfill,
    job_gaps,
    job_restatements,
    job_skipped,
)
from inventory.services import gaps as gap_services
from inventory.services.errors import NotFound


class AlertSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=selectors_alerts.ALERT_KINDS)
    subject = serializers.CharField()
    severity = serializers.CharField()
    message = serializers.CharField()
    url = serializers.CharField()


class AlertsSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="every active alert")
    by_kind = serializers.DictField(child=serializers.IntegerField(), help_text="every one by kind")
    next = serializers.CharField(allow_null=True, help_text="the next page's URL")
    previous = serializers.CharField(allow_null=True, help_text="the previous page's URL")
    alerts = AlertSerializer(many=True, help_text="this page's, the critical first")


class GapSerializer(serializers.Serializer):
    range_start = serializers.IntegerField(source="lower")
    range_end = serializers.IntegerField(source="last")
    state = serializers.CharField()
    items = serializers.IntegerField()
    batch = serializers.IntegerField(source="first_batch", allow_null=True)


class HoleSerializer(serializers.Serializer):
    range_start = serializers.IntegerField()
    range_end = serializers.IntegerField()


class RestatedRangeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    range_start = serializers.IntegerField()
    range_end = serializers.IntegerField()
    state = serializers.CharField(help_text="pending, proposed, rebuilding, done, ...")
    cause = serializers.CharField()
    reason = serializers.CharField()
    backfill = serializers.IntegerField(source="backfill_id", allow_null=True)


class SkippedRangeSerializer(serializers.Serializer):
    range_start = serializers.IntegerField(source="lower")
    range_end = serializers.IntegerField(source="last")
    items = serializers.IntegerField(help_text="items in the range now, none of them processed")
    batch = serializers.IntegerField()
    reason = serializers.CharField()


class GapReportSerializer(serializers.Serializer):
    job = serializers.CharField()
    gaps = GapSerializer(many=True)
    holes = HoleSerializer(many=True)
    skipped = SkippedRangeSerializer(
        many=True,
        help_text="skipped ranges (dead batches skipped by an operator, forward corrections), "
        "with the items in them now",
    )
    restated = RestatedRangeSerializer(
        many=True, help_text="restated ranges in the range, newest first (at most 100)"
    )


class HolesBackfillSerializer(Input):
    # bounded as a backfill's own fields (serializers/backfills.py), so the database never
    # refuses a value with an error that names no field
    lower = serializers.IntegerField(
        required=False, min_value=-BIGINT, max_value=BIGINT, help_text="first item id of the range"
    )
    upper = serializers.IntegerField(
        required=False,
        min_value=-BIGINT,
        max_value=BIGINT,
        help_text="one past the range's last id",
    )
    batch_weight = serializers.IntegerField(required=False, min_value=1, max_value=BIGINT)
    max_items = serializers.IntegerField(required=False, min_value=1, max_value=INT)
    max_concurrency = serializers.IntegerField(
        required=False, min_value=1, max_value=SMALLINT, default=1
    )
    priority = serializers.IntegerField(
        required=False, min_value=-SMALLINT - 1, max_value=SMALLINT, default=0
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="")
    preview = serializers.BooleanField(
        required=False, default=False, help_text="only show the plan"
    )
    fingerprint = serializers.RegexField(
        r"^[0-9a-f]{16}$",
        required=False,
        help_text="a holes preview's fingerprint: exactly those backfills, or 409 with the holes "
        "as they are now",
    )

    def validate(self, attrs):
        _check_order(attrs)
        return attrs


def _check_order(bounds: dict) -> None:
    """[lower, upper) must not be inverted (an empty range is a question with no answer)."""
    if "lower" in bounds and "upper" in bounds and bounds["upper"] < bounds["lower"]:
        raise ValidationError({"upper": ["must not be below lower (the range is [lower, upper))"]})


def _job(name: str) -> Job:
    job = Job.objects.select_related("connector", "watermark").filter(name=name).first()
    if job is None:
        raise NotFound(f"there is no job named {name!r}")
    return job


def _range_params(request, allowed=("lower", "upper")) -> dict:
    unknown = sorted(set(request.query_params) - set(allowed) - {"format"})
    if unknown:
        raise ValidationError(
            {key: [f"unknown; this list accepts {', '.join(allowed)}"] for key in unknown}
        )
    out = {}
    for key in allowed:
        if key in request.query_params:
            try:
                out[key] = int(request.query_params[key])
            except ValueError:
                raise ValidationError({key: ["must be an integer item id"]}) from None
            if not -BIGINT <= out[key] <= BIGINT:
                raise ValidationError({key: [f"must be between {-BIGINT} and {BIGINT}"]})
    _check_order(out)
    return out


class AlertsView(APIView):
    @extend_schema(
        summary="What needs a person now",
        description="Dead batches, watermarks that have not moved for longer than their schedule "
        "allows while items wait, connectors waiting on another, an overdue lease reaper, "
        "stalled backfills. The same list as the dashboard's alert strip and /metrics' "
        "`tidemark_alerts` (counted by kind and severity; one `tidemark_alert` series per alert "
        "with TIDEMARK_METRICS_PER_JOB=full), paged (the API's page size): the critical first, "
        "then the warnings, "
        "then the connectors waiting.",
        parameters=[OpenApiParameter("page", OpenApiTypes.INT, description="from 1")],
        responses={200: AlertsSerializer},
    )
    def get(self, request):
        number = _range_params(request, allowed=("page",)).get("page", 1)
        if number < 1:
            raise ValidationError({"page": ["pages are numbered from 1"]})
        size = api_settings.PAGE_SIZE
        found = selectors_alerts.alerts_page(limit=size, offset=(number - 1) * size)
        if number > 1 and not found.alerts:
            raise NotFound("there is no such page")

        def page_url(n: int) -> str:
            return replace_query_param(request.build_absolute_uri(), "page", n)

        data = {
            "count": found.count,
            "by_kind": found.by_kind,
            "next": page_url(number + 1) if number * size < found.count else None,
            "previous": page_url(number - 1) if number > 1 else None,
            "alerts": [alert.as_dict() for alert in found.alerts],
        }
        return Response(AlertsSerializer(data).data)


class JobGapsView(APIView):
    @extend_schema(
        summary="A job's gap report",
        description="The failed, dead, cancelled and never-planned stretches of the job's items "
        "in [lower, upper) (default: all its items), and the closed ranges a backfill of the "
        "holes would cover (failed batches still retry and are left out).",
        parameters=[
            OpenApiParameter("lower", OpenApiTypes.INT, description="first item id"),
            OpenApiParameter("upper", OpenApiTypes.INT, description="one past the last item id"),
        ],
        responses={200: GapReportSerializer},
    )
    def get(self, request, name):
        job = _job(name)
        bounds = _range_params(request)
        gaps = job_gaps(job=job, **bounds)
        holes = [{"range_start": a, "range_end": b} for a, b in holes_to_backfill(gaps)]
        restated = job_restatements(job=job, **bounds)[:100]
        skipped = job_skipped(job=job, **bounds)
        report = {
            "job": job.name,
            "gaps": gaps,
            "holes": holes,
            "skipped": skipped,
            "restated": restated,
        }
        return Response(GapReportSerializer(report).data)


class JobHolesBackfillView(APIView):
    action = "backfill_holes"  # permissions.HasRole reads the role from action_roles
    action_roles = {"backfill_holes": role_of("job.backfill_holes")}  # inventory/actions.py

    @extend_schema(
        summary="Backfill the holes of a job (operator)",
        description="Schedules one backfill per run of dead, cancelled and never-planned items "
        "in [lower, upper), all or none; with `preview: true` only returns the plan, with its "
        "`fingerprint`: given back when creating, exactly that plan runs or a 409 (code "
        "`planchanged`) carries the holes as they are now. "
        "409 when there is no hole.",
        request=HolesBackfillSerializer,
        responses={200: OpenApiTypes.OBJECT, 201: OpenApiTypes.OBJECT},
    )
    def post(self, request, name):
        job = _job(name)
        serializer = HolesBackfillSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        preview = data.pop("preview")
        if preview:
            plans = gap_services.holes_preview(
                job=job,
                **{
                    k: data[k] for k in ("lower", "upper", "batch_weight", "max_items") if k in data
                },
            )
            return Response(gap_services.holes_summary(job=job, plans=plans))
        created = run(
            "job.backfill_holes", request.user, job=job, **data, actor=actor_name(request.user)
        )
        return Response(
            {
                "job": job.name,
                "backfills": [
                    {"id": b.pk, "range_start": b.range_start, "range_end": b.range_end}
                    for b in created
                ],
            },
            status=201,
        )


class ThrottleSetSerializer(Input):
    connector = serializers.CharField(
        required=False, allow_null=True, default=None, help_text="a connector's name; null: all"
    )
    weight_per_minute = serializers.IntegerField(
        allow_null=True, min_value=1, max_value=BIGINT, help_text="null removes the budget"
    )


class BackfillThrottleView(APIView):
    action = "throttle"
    action_roles = {"throttle:PUT": role_of("throttle.set")}  # inventory/actions.py

    @extend_schema(
        summary="The shared backfill throttles and what they used in the last minute",
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        _range_params(request, allowed=())
        return Response({"throttles": selectors_backfills.backfill_throttles()})

    @extend_schema(
        summary="Set or remove a weight-per-minute budget for all backfills (operator)",
        description="Global (`connector` null) or for one connector's backfills; backfill "
        "pacing sends a batch only while the weight started in the last minute leaves room.",
        request=ThrottleSetSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request):
        serializer = ThrottleSetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        name = serializer.validated_data["connector"]
        connector = None
        if name is not None:
            connector = Connector.objects.filter(name=name).first()
            if connector is None:
                raise NotFound(f"there is no connector named {name!r}")
        run(
            "throttle.set",
            request.user,
            connector=connector,
            weight_per_minute=serializer.validated_data["weight_per_minute"],
        )
        return Response({"throttles": selectors_backfills.backfill_throttles()})
