"""/api/v1/backfills/: list, read, create, preview; pause, resume, cancel."""

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from inventory import selectors_backfills
from inventory.actions import api_roles, run
from inventory.api import serializers as s
from inventory.api.filters import BackfillFilter, StrictFilterBackend
from inventory.api.paging import NewestFirst
from inventory.api.views.base import IdViewSet, no_body, validated, with_errors
from inventory.roles import actor_name
from inventory.services import backfills as backfill_services
from inventory.services import estimates


@extend_schema_view(
    list=extend_schema(summary="List backfills with progress, newest first"),
    retrieve=extend_schema(
        summary="One backfill with progress",
        responses=with_errors({200: s.BackfillSerializer}, 404),
    ),
)
class BackfillViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, IdViewSet):
    queryset = selectors_backfills.backfills_with_progress()
    serializer_class = s.BackfillSerializer
    pagination_class = NewestFirst
    filter_backends = [StrictFilterBackend]
    filterset_class = BackfillFilter
    noun = "backfill"
    action_roles = api_roles("backfills")  # inventory/actions.py

    def get_queryset(self):
        return selectors_backfills.backfills_with_progress()

    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        # the page's ETAs in two statements, not one lookup per backfill
        return None if page is None else selectors_backfills.with_etas(page)

    @extend_schema(
        summary="Schedule a backfill of a closed item-id or time range (operator)",
        description="Give range_start/range_end (item ids) or time_start/time_end, not both. "
        "409 when the job has no items in an id range; 400 naming range_start when no item "
        "holds a time of the range. With the `fingerprint` of a preview the backfill runs "
        "exactly that plan, or is refused with a 409 (code `planchanged`) whose `plan` is the "
        "plan as it is now.",
        request=s.BackfillCreateSerializer,
        responses=with_errors({201: s.BackfillSerializer}, 400, 409),
    )
    def create(self, request):
        data = validated(s.BackfillCreateSerializer, request)
        backfill = run("job.backfill", request.user, **data, actor=actor_name(request.user))
        backfill = self.get_queryset().get(pk=backfill.pk)
        return Response(s.BackfillSerializer(backfill).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="The batches a backfill would run, without creating anything",
        description="Ids or a time range, as for creating one; the answer shows the id range "
        "a time range resolved to. 409 when the job has no items in an id range.",
        request=s.BackfillPreviewRequestSerializer,
        responses=with_errors({200: s.BackfillPreviewSerializer}, 400, 409),
    )
    @action(detail=False, methods=["post"], filter_backends=[], pagination_class=None)
    def preview(self, request):
        data = validated(s.BackfillPreviewRequestSerializer, request)
        concurrency = data.pop("max_concurrency")
        given = {k: data.pop(k) for k in backfill_services.RANGE_FIELDS if k in data}
        span = backfill_services.backfill_range(job=data["job"], **given)
        plan = run(
            "job.backfill_preview",
            request.user,
            **data,
            range_start=span.range_start,
            range_end=span.range_end,
        )
        preview = backfill_services.plan_summary(job=data["job"], span=span, plan=plan)
        took = estimates.plan_duration(job=data["job"], plan=plan, concurrency=concurrency)
        preview["estimated_seconds"] = None if took is None else took.total_seconds()
        return Response(s.BackfillPreviewSerializer(preview).data)

    def _set_status(self, request, key: str) -> Response:
        no_body(request)
        backfill = run(key, request.user, backfill=self.get_object())
        return Response(s.BackfillSerializer(self.get_queryset().get(pk=backfill.pk)).data)

    _STATUS_SCHEMA = {
        "request": None,
        "responses": with_errors({200: s.BackfillSerializer}, 404, 409),
    }

    @extend_schema(summary="Pause a running backfill (operator)", **_STATUS_SCHEMA)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._set_status(request, "backfill.pause")

    @extend_schema(summary="Resume a paused backfill (operator)", **_STATUS_SCHEMA)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._set_status(request, "backfill.resume")

    @extend_schema(summary="Cancel a backfill and its waiting batches (operator)", **_STATUS_SCHEMA)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._set_status(request, "backfill.cancel")
