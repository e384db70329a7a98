"""/api/v1/connectors/: list, read, create, change, delete; pause, resume, reset, discover; assets
announced by a producer."""

from django.db.models import Count
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from inventory import selectors
from inventory.actions import api_roles, run
from inventory.api import serializers as s
from inventory.api.filters import StrictFilterBackend
from inventory.api.paging import NewestFirst
from inventory.api.views.base import (
    DRY_RUN,
    NamedViewSet,
    dry_run_asked,
    kept_unless,
    no_body,
    validated,
    with_errors,
)
from inventory.models import Connector, WatermarkSource
from inventory.roles import actor_name


@extend_schema_view(
    list=extend_schema(summary="List connectors"),
    retrieve=extend_schema(
        summary="One connector", responses=with_errors({200: s.ConnectorSerializer}, 404)
    ),
)
class ConnectorViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, NamedViewSet):
    # a count of the jobs, not their names: a connector may have thousands (its jobs: jobs_url);
    # ordered here, as Meta.ordering is not applied to a query grouped for the count
    queryset = Connector.objects.annotate(job_count=Count("jobs")).order_by("name")
    serializer_class = s.ConnectorSerializer
    filter_backends = [StrictFilterBackend]
    filterset_fields = ["kind", "state"]
    noun = "connector"
    action_roles = api_roles("connectors")  # inventory/actions.py
    # ?dry_run=true (views/base.kept_unless; any other write refuses it: permissions.py)
    dry_run_actions = ("create", "partial_update", "destroy", "reset")

    @extend_schema(
        summary="Create a connector (admin)",
        request=s.ConnectorCreateSerializer,
        parameters=[DRY_RUN],
        responses=with_errors({201: s.ConnectorSerializer, 200: s.ConnectorSerializer}, 400, 409),
    )
    def create(self, request):
        dry_run = dry_run_asked(request)
        data = validated(s.ConnectorCreateSerializer, request)
        with kept_unless(dry_run):
            connector = run("connector.create", request.user, **data)
            body = s.ConnectorSerializer(connector).data
        return Response(body, status=status.HTTP_200_OK if dry_run else status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a connector's config, labels or start_after (admin)",
        description="A change of the source identity (config.path, meta_table, table, topic, "
        "dsn_env) while jobs read from the connector is a 400 naming the field: use reset/.",
        request=s.ConnectorUpdateSerializer,
        parameters=[DRY_RUN],
        responses=with_errors({200: s.ConnectorSerializer}, 400, 404),
    )
    def partial_update(self, request, name=None):
        dry_run = dry_run_asked(request)
        connector = self.get_object()
        data = validated(s.ConnectorUpdateSerializer, request)
        with kept_unless(dry_run):
            connector = run("connector.update", request.user, connector=connector, **data)
            body = s.ConnectorSerializer(connector).data
        return Response(body)

    @extend_schema(
        summary="Change a connector's source and start its jobs over (admin)",
        description="Sets the new config (its source identity included) and resets every job of "
        "the connector to its start position: waiting batches and open backfills are cancelled, "
        "finished batches superseded, each watermark reset with an audited event carrying the "
        "reason. 409 while a batch of these jobs is running.",
        request=s.ConnectorResetSerializer,
        parameters=[DRY_RUN],
        responses=with_errors({200: s.ConnectorSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def reset(self, request, name=None):
        dry_run = dry_run_asked(request)
        data = validated(s.ConnectorResetSerializer, request)
        with kept_unless(dry_run):
            connector = run(
                "connector.reset",
                request.user,
                connector=self.get_object(),
                config=data["config"],
                actor=actor_name(request.user),
                reason=data["reason"],
                source=WatermarkSource.API,
            )
            body = s.ConnectorSerializer(connector).data
        return Response(body)

    @extend_schema(
        summary="Delete a connector and its assets (admin; refused while jobs use it)",
        parameters=[DRY_RUN],
        responses=with_errors({204: None}, 404, 409),
    )
    def destroy(self, request, name=None):
        with kept_unless(dry_run_asked(request)):
            run("connector.delete", request.user, connector=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Pause a connector (operator)",
        request=None,
        responses=with_errors({200: s.ConnectorSerializer}, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def pause(self, request, name=None):
        no_body(request)
        connector = run(
            "connector.pause",
            request.user,
            connector=self.get_object(),
            actor=actor_name(request.user),
        )
        return Response(s.ConnectorSerializer(connector).data)

    @extend_schema(
        summary="Resume a connector (operator); it waits again if its start_after is not done",
        request=None,
        responses=with_errors({200: s.ConnectorSerializer}, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def resume(self, request, name=None):
        no_body(request)
        connector = run(
            "connector.resume",
            request.user,
            connector=self.get_object(),
            actor=actor_name(request.user),
        )
        return Response(s.ConnectorSerializer(connector).data)

    @extend_schema(
        summary="The connector's state changes, newest first (waiting -> active -> completed, "
        "pause/resume), with who or what made them and why",
        responses=with_errors({200: s.ConnectorEventSerializer(many=True)}, 404),
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
        responses=with_errors({200: s.AssetSerializer(many=True)}, 404),
    )
    @action(detail=True, methods=["get"], pagination_class=NewestFirst, filter_backends=[])
    def items(self, request, name=None):
        page = self.paginate_queryset(selectors.connector_items(connector=self.get_object()))
        return self.get_paginated_response(s.AssetSerializer(page, many=True).data)

    @extend_schema(
        summary="Look at a connector's source now and register what is new (operator)",
        request=None,
        responses=with_errors({200: s.DiscoverResultSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def discover(self, request, name=None):
        no_body(request)
        connector = self.get_object()
        registered = run("connector.discover", request.user, connector=connector)
        return Response({"connector": connector.name, "registered": registered})

    @extend_schema(
        summary="Register files a producer announces (operator)",
        description="For producers that know when a file is complete: the body is "
        '`{"assets": [{"location", "weight", "extra"}, ...]}` (at most 10,000). Ids '
        "are handed out in the order given and in the order registrations commit (a reader "
        "resuming after an id never misses a smaller one). Known locations keep their id and "
        "count as `known`: announcing the same list twice registers nothing the second time.",
        request=s.AnnounceAssetsSerializer,
        responses=with_errors({200: s.AnnounceResultSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"])
    def assets(self, request, name=None):
        connector = self.get_object()
        data = validated(s.AnnounceAssetsSerializer, request)
        announced = run(
            "connector.announce", request.user, connector=connector, items=data["assets"]
        )
        return Response(
            {
                "connector": connector.name,
                "registered": announced.registered,
                "known": announced.known,
                "assets": announced.assets,
            }
        )
