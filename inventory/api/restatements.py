"""A job's restatements: what was restated, when and why; proposed replays applied or dismissed.

`GET jobs/{name}/restatements/` (viewer), `GET .../{id}/`, `POST .../{id}/apply/` and
`POST .../{id}/dismiss/` (operator; inventory/actions.py). The services are in
services/restatement_records.py, as for the dashboard and the admin.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.actions import role_of, run
from inventory.api.paging import NewestFirst
from inventory.api.serializers import AnyJSONField, BackfillPreviewSerializer, ErrorSerializer
from inventory.api.serializers.strict import Input
from inventory.models import Job, Restatement, RestatementStatus
from inventory.roles import actor_name
from inventory.selectors_coverage import job_restatements
from inventory.services.errors import NotFound
from inventory.services.reasons import REASON_MAX


class RestatementSerializer(serializers.ModelSerializer):
    job = serializers.SlugRelatedField(read_only=True, slug_field="name")
    state = serializers.CharField(
        help_text="pending, proposed, dismissed; once applied its backfill's progress: "
        "rebuilding, done, cancelled"
    )
    detail = AnyJSONField(help_text="the source: upstream job and commits, assets, slices")
    preview = BackfillPreviewSerializer(
        allow_null=True,
        help_text="the plan proposed (proposed and applied ones), with its fingerprint",
    )

    class Meta:
        model = Restatement
        fields = [
            "id",
            "job",
            "cause",
            "status",
            "state",
            "range_start",
            "range_end",
            "priority",
            "reason",
            "detail",
            "preview",
            "backfill",
            "decided_by",
            "decided_at",
            "dismiss_reason",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class ApplySerializer(Input):
    fingerprint = serializers.RegexField(
        r"^[0-9a-f]{16}$",
        required=False,
        help_text="default: the proposal's own; after a 409, the fingerprint of the plan it "
        "showed, to run that one",
    )


class DismissSerializer(Input):
    reason = serializers.CharField(
        max_length=REASON_MAX, help_text="why the outputs stay as they are"
    )


def _job(name: str) -> Job:
    job = Job.objects.filter(name=name).first()
    if job is None:
        raise NotFound(f"there is no job named {name!r}")
    return job


def _restatement(name: str, pk: int) -> Restatement:
    record = (
        Restatement.objects.select_related("job", "backfill").filter(job__name=name, pk=pk).first()
    )
    if record is None:
        raise NotFound(f"job {name!r} has no restatement {pk}")
    return record


class JobRestatementsView(generics.ListAPIView):
    serializer_class = RestatementSerializer
    pagination_class = NewestFirst
    filter_backends: list = []
    query_parameters = ("status",)  # read by get_queryset; any other is refused (api/paging.py)

    @extend_schema(
        summary="A job's restatements, newest first",
        description="Every restatement of the job, automatic or proposed: the restated item "
        "range, its cause and reason, the proposed plan, and what became of it. `?status=` "
        "filters (pending, proposed, applied, dismissed).",
        parameters=[
            OpenApiParameter("status", OpenApiTypes.STR, enum=RestatementStatus.values),
        ],
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        records = job_restatements(job=_job(self.kwargs["name"]))
        wanted = self.request.query_params.get("status")
        if wanted is not None:
            if wanted not in RestatementStatus.values:
                raise serializers.ValidationError(
                    {"status": [f"must be one of {', '.join(RestatementStatus.values)}"]}
                )
            records = records.filter(status=wanted)
        return records


class RestatementView(APIView):
    @extend_schema(summary="One restatement", responses={200: RestatementSerializer})
    def get(self, request, name, pk):
        return Response(RestatementSerializer(_restatement(name, pk)).data)


class RestatementApplyView(APIView):
    action = "apply"  # permissions.HasRole reads the role from action_roles
    action_roles = {"apply": role_of("restatement.apply")}  # inventory/actions.py

    @extend_schema(
        summary="Apply a proposed replay (operator): create its backfill",
        description="Creates the backfill of the proposal's plan through the backfill service, "
        "pinned by its fingerprint: if the plan changed since it was proposed, 409 (code "
        "`planchanged`) with `plan` as it is now; apply again with that plan's `fingerprint` to "
        "run it. 409 too when the restatement is not proposed.",
        request=ApplySerializer,
        responses={200: RestatementSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
    )
    def post(self, request, name, pk):
        record = _restatement(name, pk)
        data = ApplySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        record = run(
            "restatement.apply",
            request.user,
            restatement=record,
            actor=actor_name(request.user),
            fingerprint=data.validated_data.get("fingerprint"),
        )
        return Response(RestatementSerializer(_restatement(name, record.pk)).data)


class RestatementDismissView(APIView):
    action = "dismiss"
    action_roles = {"dismiss": role_of("restatement.dismiss")}

    @extend_schema(
        summary="Dismiss a proposed replay with a reason (operator)",
        request=DismissSerializer,
        responses={200: RestatementSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
    )
    def post(self, request, name, pk):
        record = _restatement(name, pk)
        data = DismissSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        record = run(
            "restatement.dismiss",
            request.user,
            restatement=record,
            actor=actor_name(request.user),
            reason=data.validated_data["reason"],
        )
        return Response(
            RestatementSerializer(_restatement(name, record.pk)).data, status.HTTP_200_OK
        )
