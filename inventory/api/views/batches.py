"""/api/v1/batches/: list, read; retry, cancel, skip; heartbeat, succeed, fail from external
processing."""

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.response import Response

from inventory import selectors
from inventory.actions import api_roles, run
from inventory.api import serializers as s
from inventory.api.filters import BatchFilter, StrictFilterBackend
from inventory.api.paging import NewestFirst
from inventory.api.views.base import IdViewSet, no_body, validated, with_errors
from inventory.models import Batch, BatchAttempt
from inventory.roles import actor_name
from inventory.services.errors import NotFound


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
        responses=with_errors({200: s.BatchDetailSerializer}, 404),
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
        responses=with_errors({200: s.BatchItemSerializer(many=True)}, 404),
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
        responses=with_errors({200: s.LeaseSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def heartbeat(self, request, pk=None):
        data = validated(s.HeartbeatSerializer, request)
        expires = run(
            "batch.heartbeat",
            request.user,
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
        responses=with_errors({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def succeed(self, request, pk=None):
        data = validated(s.SucceedSerializer, request)
        batch = run(
            "batch.succeed",
            request.user,
            batch_id=self.object_id(),
            attempt=data["attempt"],
            result=data["result"],
            watermark_value=data["watermark_value"],
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Report a failed attempt (operator); retried after a backoff, or dead",
        request=s.FailSerializer,
        responses=with_errors({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def fail(self, request, pk=None):
        data = validated(s.FailSerializer, request)
        batch = run(
            "batch.fail",
            request.user,
            batch_id=self.object_id(),
            attempt=data["attempt"],
            error=data["error"],
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Send a dead or failed batch back to the queue (operator)",
        request=None,
        responses=with_errors({200: s.BatchDetailSerializer}, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        no_body(request)
        batch = run(
            "batch.retry", request.user, batch_id=self.object_id(), actor=actor_name(request.user)
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Cancel a queued, running or failed batch (operator)",
        request=s.CancelSerializer,
        responses=with_errors({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        data = validated(s.CancelSerializer, request)
        batch = run(
            "batch.cancel",
            request.user,
            batch_id=self.object_id(),
            actor=actor_name(request.user),
            reason=data["reason"],
        )
        return self._detail(batch.pk)

    @extend_schema(
        summary="Skip a dead batch with a reason (admin); the watermark may move over it",
        request=s.SkipSerializer,
        responses=with_errors({200: s.BatchDetailSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def skip(self, request, pk=None):
        data = validated(s.SkipSerializer, request)
        batch = run(
            "batch.skip",
            request.user,
            batch_id=self.object_id(),
            actor=actor_name(request.user),
            reason=data["reason"],
        )
        return self._detail(batch.pk)
