"""/api/v1/backfill-throttle/freshness/: the freshness controller's state, its decisions and the
live jobs' targets (GET); a person's pin of the backfills' rate (PUT, operator); the controller's
settings (PATCH, admin). docs/throttle.md."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.actions import role_of, run
from inventory.api.serializers.strict import Input
from inventory.bounds import BIGINT
from inventory.roles import actor_name
from inventory.selectors_freshness import ThrottleStatus, throttle_status

DECISIONS = 50  # the latest decisions a GET returns


class PinSerializer(Input):
    pinned_rate = serializers.IntegerField(
        allow_null=True,
        min_value=1,
        max_value=BIGINT,
        help_text="weight per minute for all backfills, instead of the controller's; null: unpin",
    )


class ControllerSettingsSerializer(Input):
    enabled = serializers.BooleanField(required=False)
    increase_fraction = serializers.FloatField(required=False, min_value=0.0001, max_value=1)
    decrease_factor = serializers.FloatField(required=False, min_value=0.0001, max_value=0.9999)
    floor_fraction = serializers.FloatField(required=False, min_value=0, max_value=0.9999)
    slow_above = serializers.FloatField(required=False, min_value=0.0001, max_value=1)
    speed_below = serializers.FloatField(required=False, min_value=0.0001, max_value=1)
    interval_seconds = serializers.IntegerField(required=False, min_value=1, max_value=86_400)


def _when(moment) -> str | None:
    return moment.isoformat() if moment else None


def status_as_dict(status: ThrottleStatus) -> dict:
    row = status.controller
    return {
        "rate": status.effective_rate,
        "concurrency": status.effective_concurrency,
        "controller": {
            "enabled": row.enabled,
            "rate": row.rate,
            "concurrency": row.concurrency,
            "reference_rate": row.reference_rate,
            "increase_fraction": row.increase_fraction,
            "decrease_factor": row.decrease_factor,
            "floor_fraction": row.floor_fraction,
            "slow_above": row.slow_above,
            "speed_below": row.speed_below,
            "interval_seconds": row.interval_seconds,
            "stepped_at": _when(row.stepped_at),
        },
        "pin": None
        if row.pinned_rate is None
        else {"rate": row.pinned_rate, "by": row.pinned_by, "at": _when(row.pinned_at)},
        "jobs": [
            {
                "job": job.name,
                "target_seconds": job.target_seconds,
                "target_items": job.target_items,
                "seconds_behind": job.seconds_behind,
                "items_behind": job.items_behind,
                "missing": job.missing,
                "used": None if job.used is None else round(job.used, 3),
            }
            for job in status.jobs
        ],
        "decisions": [
            {
                "id": d.pk,
                "at": _when(d.at),
                "old_rate": d.old_rate,
                "new_rate": d.new_rate,
                "old_concurrency": d.old_concurrency,
                "new_concurrency": d.new_concurrency,
                "reason": d.reason,
                "missing": d.missing,
            }
            for d in status.decisions
        ],
    }


class FreshnessThrottleView(APIView):
    action = "freshness"
    action_roles = {
        "freshness:PUT": role_of("throttle.pin"),
        "freshness:PATCH": role_of("throttle.configure"),
    }  # inventory/actions.py

    @extend_schema(
        summary="The freshness controller: the backfills' rate and cap now, the pin, the live "
        "jobs' freshness targets and the latest decisions (rate null: no limit)",
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        return Response(status_as_dict(throttle_status(decisions=DECISIONS)))

    @extend_schema(
        summary="Pin the backfills' rate (weight per minute) over the controller's, or unpin "
        "with null (operator)",
        request=PinSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request):
        serializer = PinSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        run(
            "throttle.pin",
            request.user,
            rate=serializer.validated_data["pinned_rate"],
            actor=actor_name(request.user),
        )
        return Response(status_as_dict(throttle_status(decisions=DECISIONS)))

    @extend_schema(
        summary="Change the freshness controller's settings (admin)",
        request=ControllerSettingsSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def patch(self, request):
        serializer = ControllerSettingsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        run(
            "throttle.configure",
            request.user,
            actor=actor_name(request.user),
            **serializer.validated_data,
        )
        return Response(status_as_dict(throttle_status(decisions=DECISIONS)))
