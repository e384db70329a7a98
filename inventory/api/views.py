"""API views: validate with a serializer, call one service (or selector), serialize the result.

Roles per action come from inventory/actions.py (`action_roles`, read by permissions.HasRole);
service errors become 400/404/409 in exceptions.exception_handler.
"""

from django.db.models import Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from inventory import selectors
from inventory.actions import api_roles
from inventory.api import serializers as s
from inventory.api.filters import BackfillFilter, BatchFilter, StrictFilterBackend
from inventory.models import (
    BackfillStatus,
    Batch,
    BatchAttempt,
    Connector,
    Job,
    WatermarkSource,
)
from inventory.roles import actor_name
from inventory.services import assets as asset_services
from inventory.services import backfills as backfill_services
from inventory.services import connectors as connector_services
from inventory.services import corrections
from inventory.services import jobs as job_services
from inventory.services import lifecycle as batch_services
from inventory.services import scheduling as scheduling_services
from inventory.services.errors import NotFound
from inventory.sources import discovery

NAME_PATTERN = r"[-a-zA-Z0-9_]+"
ID_PATTERN = r"[0-9]+"

ERRORS = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="invalid input: {field: [reason]}"),
    404: OpenApiResponse(s.ErrorSerializer, description="unknown name or id"),
    409: OpenApiResponse(s.ErrorSerializer, description="the object's state does not allow it"),
}


def _responses(ok: dict, *codes: int) -> dict:
    return {**ok, **{code: ERRORS[code] for code in codes}}


def _valid(serializer_class, request, **kwargs) -> dict:
    serializer = serializer_class(data=request.data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class NewestFirst(CursorPagination):
    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class NamedViewSet(viewsets.GenericViewSet):
    """Resources addressed by name; unknown names are 404 with the name in the message."""

    lookup_field = "name"
    lookup_value_regex = NAME_PATTERN
    noun = "object"

    def get_object(self):
        name = self.kwargs[self.lookup_field]
        obj = self.get_queryset().filter(name=name).first()
        if obj is None:
            raise NotFound(f"there is no {self.noun} named {name!r}")
        return obj


class IdViewSet(viewsets.GenericViewSet):
    lookup_value_regex = ID_PATTERN
    noun = "object"

    def object_id(self) -> int:
        value = int(self.kwargs["pk"])
        if value > s.BIGINT:
            raise NotFound(f"{self.noun} {value} does not exist")
        return value

    def get_object(self):
        pk = self.object_id()
        obj = self.get_queryset().filter(pk=pk).first()
        if obj is None:
            raise NotFound(f"{self.noun} {pk} does not exist")
        return obj


# ---- connectors --------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(summary="List connectors"),
    retrieve=extend_schema(
        summary="One connector", responses=_responses({200: s.ConnectorSerializer}, 404)
    ),
)
class ConnectorViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, NamedViewSet):
    queryset = Connector.objects.prefetch_related("jobs")
    serializer_class = s.ConnectorSerializer
    filter_backends = [StrictFilterBackend]
    filterset_fields = ["kind", "state"]
    noun = "connector"
    action_roles = api_roles("connectors")  # inventory/actions.py

    @extend_schema(
        summary="Create a connector (admin)",
        request=s.ConnectorCreateSerializer,
        responses=_responses({201: s.ConnectorSerializer}, 400, 409),
    )
    def create(self, request):
        data = _valid(s.ConnectorCreateSerializer, request)
        connector = connector_services.connector_create(**data)
        return Response(s.ConnectorSerializer(connector).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a connector's config, labels or start_after (admin)",
        description="A change of the source identity (config.path, meta_table, table, topic, "
        "dsn_env) while jobs read from the connector is a 400 naming the field: use reset/.",
        request=s.ConnectorUpdateSerializer,
        responses=_responses({200: s.ConnectorSerializer}, 400, 404),
    )
    def partial_update(self, request, name=None):
        connector = self.get_object()
        data = _valid(s.ConnectorUpdateSerializer, request)
        connector = connector_services.connector_update(connector=connector, **data)
        return Response(s.ConnectorSerializer(connector).data)

    @extend_schema(
        summary="Change a connector's source and start its jobs over (admin)",
        description="Sets the new config (its source identity included) and resets every job of "
        "the connector to its start position: waiting batches and open backfills are cancelled, "
        "finished batches superseded, each watermark reset with an audited event carrying the "
        "reason. 409 while a batch of these jobs is running.",
        request=s.ConnectorResetSerializer,
        responses=_responses({200: s.ConnectorSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def reset(self, request, name=None):
        data = _valid(s.ConnectorResetSerializer, request)
        connector = connector_services.connector_reset(
            connector=self.get_object(),
            config=data["config"],
            actor=actor_name(request.user),
            reason=data["reason"],
            source=WatermarkSource.API,
        )
        return Response(s.ConnectorSerializer(connector).data)

    @extend_schema(
        summary="Delete a connector and its assets (admin; refused while jobs use it)",
        responses=_responses({204: None}, 404, 409),
    )
    def destroy(self, request, name=None):
        connector_services.connector_delete(connector=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Pause a connector (operator)",
        request=None,
        responses=_responses({200: s.ConnectorSerializer}, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def pause(self, request, name=None):
        connector = connector_services.connector_pause(
            connector=self.get_object(), actor=actor_name(request.user)
        )
        return Response(s.ConnectorSerializer(connector).data)

    @extend_schema(
        summary="Resume a connector (operator); it waits again if its start_after is not done",
        request=None,
        responses=_responses({200: s.ConnectorSerializer}, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def resume(self, request, name=None):
        connector = connector_services.connector_resume(
            connector=self.get_object(), actor=actor_name(request.user)
        )
        return Response(s.ConnectorSerializer(connector).data)

    @extend_schema(
        summary="The connector's state changes, newest first (waiting -> active -> completed, "
        "pause/resume), with who or what made them and why",
        responses=_responses({200: s.ConnectorEventSerializer(many=True)}, 404),
    )
    @action(detail=True, methods=["get"], pagination_class=NewestFirst, filter_backends=[])
    def events(self, request, name=None):
        events = selectors.connector_history(connector=self.get_object())
        page = self.paginate_queryset(events)
        return self.get_paginated_response(s.ConnectorEventSerializer(page, many=True).data)

    @extend_schema(
        summary="The connector's registered items (files), newest first",
        description="What discovery or producers registered: `{id, item, weight, discovered_at, "
        "extra}`; follow `next` for older ones (`?page_size=` up to 1000). Sources read from "
        "a table, a topic or another job's output list what was registered from them, if "
        "anything. `tidemark processor run --sample N` reads the newest N.",
        responses=_responses({200: s.AssetSerializer(many=True)}, 404),
    )
    @action(detail=True, methods=["get"], pagination_class=NewestFirst, filter_backends=[])
    def items(self, request, name=None):
        page = self.paginate_queryset(selectors.connector_items(connector=self.get_object()))
        return self.get_paginated_response(s.AssetSerializer(page, many=True).data)

    @extend_schema(
        summary="Look at a connector's source now and register what is new (operator)",
        request=None,
        responses=_responses({200: s.DiscoverResultSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def discover(self, request, name=None):
        connector = self.get_object()
        registered = discovery.connector_discover_now(connector=connector)
        return Response({"connector": connector.name, "registered": registered})

    @extend_schema(
        summary="Register files a producer announces (operator)",
        description="For producers that know when a file is complete: the body is "
        '`{"assets": [{"location", "weight", "extra"}, ...]}` (at most 10,000). Ids '
        "are handed out in the order given and in the order registrations commit (a reader "
        "resuming after an id never misses a smaller one). Known locations keep their id and "
        "count as `known`: announcing the same list twice registers nothing the second time.",
        request=s.AnnounceAssetsSerializer,
        responses=_responses({200: s.AnnounceResultSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def assets(self, request, name=None):
        connector = self.get_object()
        data = _valid(s.AnnounceAssetsSerializer, request)
        announced = asset_services.assets_announce(connector=connector, items=data["assets"])
        return Response(
            {
                "connector": connector.name,
                "registered": announced.registered,
                "known": announced.known,
                "assets": announced.assets,
            }
        )


# ---- jobs, watermarks, external processing -----------------------------------------------------


def _with_state(job: Job) -> Job:
    """Attach the read-side state the job detail and the watermark show."""
    job.lag = selectors.job_lag(job=job)
    job.blocked_by = selectors.job_blocker(job=job)
    return job


def _watermark_state(job: Job):
    watermark = job.watermark
    watermark.lag = selectors.job_lag(job=job)
    watermark.blocked_by = selectors.job_blocker(job=job)
    return watermark


@extend_schema_view(list=extend_schema(summary="List jobs"))
class JobViewSet(mixins.ListModelMixin, NamedViewSet):
    queryset = Job.objects.select_related("connector", "watermark")
    serializer_class = s.JobSerializer
    filter_backends = [StrictFilterBackend]
    filterset_fields = {"connector__name": ["exact"], "paused": ["exact"]}
    noun = "job"
    action_roles = api_roles("jobs")  # inventory/actions.py

    @extend_schema(
        summary="One job, with its watermark, lag, blocker and batch counts",
        responses=_responses({200: s.JobDetailSerializer}, 404),
    )
    def retrieve(self, request, name=None):
        job = _with_state(self.get_object())
        job.batch_counts = selectors.job_batch_counts(job=job)
        return Response(s.JobDetailSerializer(job).data)

    @extend_schema(
        summary="Create a job (admin); its watermark starts at start_position",
        request=s.JobWriteSerializer,
        responses=_responses({201: s.JobSerializer}, 400, 409),
    )
    def create(self, request):
        data = _valid(s.JobWriteSerializer, request)
        job = job_services.job_create(**data)
        return Response(s.JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a job's settings (admin); name, connector and watermark type are fixed",
        request=s.JobWriteSerializer(partial=True),
        responses=_responses({200: s.JobSerializer}, 400, 404, 409),
    )
    def partial_update(self, request, name=None):
        job = self.get_object()
        serializer = s.JobWriteSerializer(job, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        job = job_services.job_update(job=job, **serializer.validated_data)
        return Response(s.JobSerializer(job).data)

    @extend_schema(
        summary="Delete a job with its batches and history (admin; refused while one runs)",
        responses=_responses({204: None}, 404, 409),
    )
    def destroy(self, request, name=None):
        job_services.job_delete(job=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Pause a job (operator): it plans nothing and hands out no batch until resumed",
        request=None,
        responses=_responses({200: s.JobSerializer}, 404),
    )
    @action(detail=True, methods=["post"])
    def pause(self, request, name=None):
        job = job_services.job_set_paused(job=self.get_object(), paused=True)
        return Response(s.JobSerializer(job).data)

    @extend_schema(
        summary="Resume a paused job (operator)",
        request=None,
        responses=_responses({200: s.JobSerializer}, 404),
    )
    @action(detail=True, methods=["post"])
    def resume(self, request, name=None):
        job = job_services.job_set_paused(job=self.get_object(), paused=False)
        return Response(s.JobSerializer(job).data)

    @extend_schema(
        summary="Plan the job's new items now and hand them to the workers (operator)",
        description="A `files` job's connector first discovers files that landed since its "
        "last scan, so they are part of this run.",
        request=None,
        responses=_responses({200: s.RunResultSerializer}, 404),
    )
    @action(detail=True, methods=["post"])
    def run(self, request, name=None):
        outcome = scheduling_services.job_run_now(job=self.get_object())
        return Response(s.RunResultSerializer(outcome).data)

    @extend_schema(
        summary="Take the next batch to process outside Tidemark (operator)",
        description="Starts the batch's next attempt under a lease. Keep it alive with "
        "`batches/{id}/heartbeat/`, then report `succeed/` or `fail/` with the same `attempt`. "
        "204 when nothing is waiting.",
        request=s.AcquireSerializer,
        responses=_responses(
            {
                200: s.AcquiredBatchSerializer,
                204: OpenApiResponse(description="no batch is waiting"),
            },
            400,
            404,
            409,
        ),
    )
    @action(detail=True, methods=["post"])
    def acquire(self, request, name=None):
        job = self.get_object()
        data = _valid(s.AcquireSerializer, request)
        batch = batch_services.batch_acquire(
            job=job,
            worker=data.get("worker") or f"api:{actor_name(request.user)}",
            lease_seconds=data.get("lease_seconds"),
        )
        if batch is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        batch = Batch.objects.select_related("job__connector").get(pk=batch.pk)
        batch.items = selectors.batch_items(batch=batch)
        return Response(s.AcquiredBatchSerializer(batch).data)

    @extend_schema(
        methods=["GET"],
        summary="The job's watermark, lag and blocker",
        responses=_responses({200: s.WatermarkStateSerializer}, 404),
    )
    @extend_schema(
        methods=["POST"],
        summary="Correct the watermark (admin); moving it backwards needs replay=true",
        request=s.WatermarkCorrectionSerializer,
        responses=_responses({200: s.WatermarkStateSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["get", "post"])
    def watermark(self, request, name=None):
        job = self.get_object()
        if request.method == "POST":
            data = _valid(s.WatermarkCorrectionSerializer, request)
            corrections.watermark_correct(
                job=job,
                value=data.get("value"),
                position=data.get("position"),
                actor=actor_name(request.user),
                reason=data["reason"],
                replay=data["replay"],
                source=WatermarkSource.API,
            )
            job = self.get_queryset().get(pk=job.pk)
        return Response(s.WatermarkStateSerializer(_watermark_state(job)).data)

    @extend_schema(
        summary="The job's watermark events, newest first",
        responses=_responses({200: s.WatermarkEventSerializer(many=True)}, 404),
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="watermark/history",
        pagination_class=NewestFirst,
        filter_backends=[],
    )
    def watermark_history(self, request, name=None):
        events = selectors.watermark_history(job=self.get_object())
        page = self.paginate_queryset(events)
        return self.get_paginated_response(s.WatermarkEventSerializer(page, many=True).data)


# ---- batches -----------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(summary="List batches, newest first (filters: job, status, kind, time)"),
)
class BatchViewSet(mixins.ListModelMixin, IdViewSet):
    queryset = Batch.objects.select_related("job__connector")
    serializer_class = s.BatchSerializer
    pagination_class = NewestFirst
    filter_backends = [StrictFilterBackend]
    filterset_class = BatchFilter
    noun = "batch"
    action_roles = api_roles("batches")  # inventory/actions.py

    @extend_schema(
        summary="One batch with its attempts, error, result and config snapshot",
        responses=_responses({200: s.BatchDetailSerializer}, 404),
    )
    def retrieve(self, request, pk=None):
        batch = self.get_object()
        return Response(s.BatchDetailSerializer(batch).data)

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action != "list":
            queryset = queryset.prefetch_related(
                Prefetch("attempts", queryset=BatchAttempt.objects.order_by("number"))
            )
        return queryset

    @extend_schema(
        summary="The items a batch covers, in id order",
        responses=_responses({200: s.BatchItemSerializer(many=True)}, 404),
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def items(self, request, pk=None):
        batch = Batch.objects.select_related("job__connector").filter(pk=self.object_id()).first()
        if batch is None:
            raise NotFound(f"batch {self.object_id()} does not exist")
        items = selectors.batch_items(batch=batch)
        return Response(s.BatchItemSerializer(items, many=True).data)

    def _detail(self, batch_id: int) -> Response:
        return Response(s.BatchDetailSerializer(self.get_queryset().get(pk=batch_id)).data)

    @extend_schema(
        summary="Extend the lease of a running attempt (operator)",
        request=s.HeartbeatSerializer,
        responses=_responses({200: s.LeaseSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def heartbeat(self, request, pk=None):
        data = _valid(s.HeartbeatSerializer, request)
        expires = batch_services.batch_heartbeat(
            batch_id=self.object_id(),
            attempt=data["attempt"],
            lease_seconds=data.get("lease_seconds"),
        )
        return Response(s.LeaseSerializer({"lease_expires_at": expires}).data)

    @extend_schema(
        summary="Commit a batch whose output is written (operator); moves the watermark",
        description="409 when the attempt no longer holds the lease (it expired, or the batch "
        "was taken over, cancelled or finished).",
        request=s.SucceedSerializer,
        responses=_responses({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def succeed(self, request, pk=None):
        data = _valid(s.SucceedSerializer, request)
        batch = batch_services.batch_succeed(
            batch_id=self.object_id(),
            attempt=data["attempt"],
            result=data["result"],
            watermark_value=data["watermark_value"],
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Report a failed attempt (operator); retried after a backoff, or dead",
        request=s.FailSerializer,
        responses=_responses({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def fail(self, request, pk=None):
        data = _valid(s.FailSerializer, request)
        batch = batch_services.batch_fail(
            batch_id=self.object_id(), attempt=data["attempt"], error=data["error"]
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Send a dead or failed batch back to the queue (operator)",
        request=None,
        responses=_responses({200: s.BatchDetailSerializer}, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        batch = batch_services.batch_retry(
            batch_id=self.object_id(), actor=actor_name(request.user)
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Cancel a queued, running or failed batch (operator)",
        request=s.CancelSerializer,
        responses=_responses({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        data = _valid(s.CancelSerializer, request)
        batch = batch_services.batch_cancel(
            batch_id=self.object_id(), actor=actor_name(request.user), reason=data["reason"]
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Skip a dead batch with a reason (admin); the watermark may move over it",
        request=s.SkipSerializer,
        responses=_responses({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def skip(self, request, pk=None):
        data = _valid(s.SkipSerializer, request)
        batch = batch_services.batch_skip(
            batch_id=self.object_id(), actor=actor_name(request.user), reason=data["reason"]
        )
        return self._detail(batch.pk)


# ---- backfills ---------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(summary="List backfills with progress, newest first"),
    retrieve=extend_schema(
        summary="One backfill with progress",
        responses=_responses({200: s.BackfillSerializer}, 404),
    ),
)
class BackfillViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, IdViewSet):
    queryset = selectors.backfills_with_progress()
    serializer_class = s.BackfillSerializer
    pagination_class = NewestFirst
    filter_backends = [StrictFilterBackend]
    filterset_class = BackfillFilter
    noun = "backfill"
    action_roles = api_roles("backfills")  # inventory/actions.py

    def get_queryset(self):
        return selectors.backfills_with_progress()

    @extend_schema(
        summary="Schedule a backfill of a closed item-id or time range (operator)",
        description="Give range_start/range_end (item ids) or time_start/time_end, not both. "
        "409 when the job has no items in an id range; 400 naming range_start when no item "
        "holds a time of the range. With the `fingerprint` of a preview the backfill runs "
        "exactly that plan, or is refused with a 409 (code `planchanged`) whose `plan` is the "
        "plan as it is now.",
        request=s.BackfillCreateSerializer,
        responses=_responses({201: s.BackfillSerializer}, 400, 409),
    )
    def create(self, request):
        data = _valid(s.BackfillCreateSerializer, request)
        backfill = backfill_services.backfill_create(**data, actor=actor_name(request.user))
        backfill = self.get_queryset().get(pk=backfill.pk)
        return Response(s.BackfillSerializer(backfill).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="The batches a backfill would run, without creating anything",
        description="Ids or a time range, as for creating one; the answer shows the id range "
        "a time range resolved to. 409 when the job has no items in an id range.",
        request=s.BackfillPlanSerializer,
        responses=_responses({200: s.BackfillPreviewSerializer}, 400, 409),
    )
    @action(detail=False, methods=["post"], filter_backends=[], pagination_class=None)
    def preview(self, request):
        data = _valid(s.BackfillPlanSerializer, request)
        given = {k: data.pop(k) for k in backfill_services.RANGE_FIELDS if k in data}
        span = backfill_services.backfill_range(job=data["job"], **given)
        plan = backfill_services.backfill_preview(
            **data, range_start=span.range_start, range_end=span.range_end
        )
        preview = backfill_services.plan_summary(job=data["job"], span=span, plan=plan)
        return Response(s.BackfillPreviewSerializer(preview).data)

    def _set_status(self, new_status: str) -> Response:
        backfill = backfill_services.backfill_set_status(
            backfill=self.get_object(), status=new_status
        )
        return Response(s.BackfillSerializer(self.get_queryset().get(pk=backfill.pk)).data)

    _STATUS_SCHEMA = {
        "request": None,
        "responses": _responses({200: s.BackfillSerializer}, 404, 409),
    }

    @extend_schema(summary="Pause a running backfill (operator)", **_STATUS_SCHEMA)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._set_status(BackfillStatus.PAUSED)

    @extend_schema(summary="Resume a paused backfill (operator)", **_STATUS_SCHEMA)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._set_status(BackfillStatus.RUNNING)

    @extend_schema(summary="Cancel a backfill and its waiting batches (operator)", **_STATUS_SCHEMA)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._set_status(BackfillStatus.CANCELLED)
