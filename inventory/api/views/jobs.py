"""/api/v1/jobs/: list, read, create, change, delete; run, pause, resume; the watermark and its
correction; acquire (one batch or several) and commit several for external processing."""

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from inventory import selectors, selectors_coverage, selectors_health
from inventory.actions import api_roles, run
from inventory.api import serializers as s
from inventory.api.filters import JobFilter, StrictFilterBackend
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
from inventory.models import Batch, BatchAttempt, Job, WatermarkSource
from inventory.roles import actor_name


def _with_state(job: Job) -> Job:
    """Attach the read-side state the job detail and the watermark show."""
    job.lag = selectors.job_lag(job=job)
    job.blocked_by = selectors.job_blocker(job=job)
    return job


def _with_attempts(ids: list[int]) -> dict[int, Batch]:
    """The batches `ids` by id, with their job, connector and attempts in two more queries (not a
    query of attempts per batch)."""
    return (
        Batch.objects.select_related("job__connector")
        .prefetch_related(Prefetch("attempts", queryset=BatchAttempt.objects.order_by("number")))
        .in_bulk(ids)
    )


def _watermark_state(job: Job):
    watermark = job.watermark
    watermark.lag = selectors.job_lag(job=job)
    watermark.blocked_by = selectors.job_blocker(job=job)
    watermark.skipped_items = sum(r.items for r in selectors_coverage.job_skipped(job=job))
    return watermark


class JobViewSet(mixins.ListModelMixin, NamedViewSet):
    queryset = Job.objects.select_related("connector", "watermark")
    serializer_class = s.JobSerializer
    filter_backends = [StrictFilterBackend]
    filterset_class = JobFilter
    noun = "job"
    action_roles = api_roles("jobs")  # inventory/actions.py
    # ?dry_run=true (views/base.kept_unless; any other write refuses it: permissions.py)
    dry_run_actions = ("create", "partial_update", "destroy")

    @extend_schema(summary="List jobs, each with its state and lag", responses=s.JobListSerializer)
    def list(self, request):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        jobs = page if page is not None else list(self.filter_queryset(self.get_queryset()))
        health = selectors_health.Health().of([job.pk for job in jobs])
        for job in jobs:
            job.state, job.lag = health.get(job.pk, ("current", None))
            behind = selectors_health.time_lag(job)
            job.time_lag_seconds = None if behind is None else int(behind.total_seconds())
        data = s.JobListSerializer(jobs, many=True).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    @extend_schema(
        summary="One job, with its watermark, lag, blocker and batch counts",
        responses=with_errors({200: s.JobDetailSerializer}, 404),
    )
    def retrieve(self, request, name=None):
        job = _with_state(self.get_object())
        job.batch_counts = selectors.job_batch_counts(job=job)
        return Response(s.JobDetailSerializer(job).data)

    @extend_schema(
        summary="Create a job (admin); its watermark starts at start_position",
        request=s.JobWriteSerializer,
        parameters=[DRY_RUN],
        responses=with_errors({201: s.JobSerializer, 200: s.JobSerializer}, 400, 409),
    )
    def create(self, request):
        dry_run = dry_run_asked(request)
        data = validated(s.JobWriteSerializer, request)
        with kept_unless(dry_run):
            job = run("job.create", request.user, **data)
            body = s.JobSerializer(job).data
        return Response(body, status=status.HTTP_200_OK if dry_run else status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a job's settings (admin); name, connector and watermark type are fixed",
        request=s.JobWriteSerializer(partial=True),
        parameters=[DRY_RUN],
        responses=with_errors({200: s.JobSerializer}, 400, 404, 409),
    )
    def partial_update(self, request, name=None):
        dry_run = dry_run_asked(request)
        job = self.get_object()
        serializer = s.JobWriteSerializer(job, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        with kept_unless(dry_run):
            job = run("job.update", request.user, job=job, **serializer.validated_data)
            body = s.JobSerializer(job).data
        return Response(body)

    @extend_schema(
        summary="Delete a job with its batches and history (admin; refused while one runs)",
        parameters=[DRY_RUN],
        responses=with_errors({204: None}, 404, 409),
    )
    def destroy(self, request, name=None):
        with kept_unless(dry_run_asked(request)):
            run("job.delete", request.user, job=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Pause a job (operator): it plans nothing and hands out no batch until resumed",
        request=None,
        responses=with_errors({200: s.JobSerializer}, 404),
    )
    @action(detail=True, methods=["post"])
    def pause(self, request, name=None):
        no_body(request)
        job = run("job.pause", request.user, job=self.get_object())
        return Response(s.JobSerializer(job).data)

    @extend_schema(
        summary="Resume a paused job (operator)",
        request=None,
        responses=with_errors({200: s.JobSerializer}, 404),
    )
    @action(detail=True, methods=["post"])
    def resume(self, request, name=None):
        no_body(request)
        job = run("job.resume", request.user, job=self.get_object())
        return Response(s.JobSerializer(job).data)

    @extend_schema(
        summary="Plan the job's new items now and hand them to the workers (operator)",
        description="A `files` job's connector first discovers files that landed since its "
        "last scan, so they are part of this run.",
        request=None,
        responses=with_errors({200: s.RunResultSerializer}, 404),
    )
    @action(detail=True, methods=["post"])
    def run(self, request, name=None):
        no_body(request)
        outcome = run("job.run", request.user, job=self.get_object())
        return Response(s.RunResultSerializer(outcome).data)

    @extend_schema(
        summary="Take the next batch to process outside Tidemark (operator)",
        description="Starts the batch's next attempt under a lease. Keep it alive with "
        "`batches/{id}/heartbeat/`, then report `succeed/` or `fail/` with the same `attempt`. "
        "204 when nothing is waiting.",
        request=s.AcquireSerializer,
        responses=with_errors(
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
        data = validated(s.AcquireSerializer, request)
        batch = run(
            "job.acquire",
            request.user,
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
        summary="Take up to `count` batches at once to process outside Tidemark (operator)",
        description="Starts each batch's next attempt under a lease, in one transaction: each is "
        "the batch `acquire/` would have given next, by the same rules. Fewer than `count` (or "
        "none: an empty list) when the work runs out or a concurrency limit is reached. Commit "
        "them together with `succeed-batches/`, or one by one with `batches/{id}/succeed/`.",
        request=s.AcquireBatchesSerializer,
        responses=with_errors({200: s.AcquiredBatchesSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["post"], url_path="acquire-batches")
    def acquire_batches(self, request, name=None):
        job = self.get_object()
        data = validated(s.AcquireBatchesSerializer, request)
        started = run(
            "job.acquire_batches",
            request.user,
            job=job,
            worker=data.get("worker") or f"api:{actor_name(request.user)}",
            count=data["count"],
            lease_seconds=data.get("lease_seconds"),
        )
        by_id = _with_attempts([b.pk for b in started])
        batches = selectors.batches_with_items([by_id[b.pk] for b in started])
        return Response(s.AcquiredBatchesSerializer({"batches": batches}).data)

    @extend_schema(
        summary="Commit several of the job's batches whose output is written (operator)",
        description="Each batch commits as `batches/{id}/succeed/` commits one (its status and "
        "the watermark move together, only for the current attempt holding a live lease), all in "
        "one transaction. A batch whose attempt may not commit is left as it is and listed in "
        "`refused` with the reason; the others commit. 400 naming `batches[i].id` when a batch "
        "is named twice or is not the job's: then nothing commits.",
        request=s.SucceedBatchesSerializer,
        responses=with_errors({200: s.SucceededBatchesSerializer}, 400, 404),
    )
    @action(detail=True, methods=["post"], url_path="succeed-batches")
    def succeed_batches(self, request, name=None):
        job = self.get_object()
        data = validated(s.SucceedBatchesSerializer, request)
        outcome = run("job.succeed_batches", request.user, job=job, commits=list(data["batches"]))
        committed = _with_attempts([b.pk for b in outcome.committed])
        return Response(
            s.SucceededBatchesSerializer(
                {
                    "committed": [committed[b.pk] for b in outcome.committed],
                    "refused": [{"id": k, "reason": v} for k, v in outcome.refused.items()],
                }
            ).data
        )

    @extend_schema(
        methods=["GET"],
        summary="The job's watermark, lag and blocker",
        responses=with_errors({200: s.WatermarkStateSerializer}, 404),
    )
    @extend_schema(
        methods=["POST"],
        summary="Correct the watermark (admin); moving it backwards needs replay=true",
        request=s.WatermarkCorrectionSerializer,
        responses=with_errors({200: s.WatermarkStateSerializer}, 400, 404, 409),
    )
    @action(detail=True, methods=["get", "post"])
    def watermark(self, request, name=None):
        job = self.get_object()
        if request.method == "POST":
            data = validated(s.WatermarkCorrectionSerializer, request)
            run(
                "watermark.correct",
                request.user,
                job=job,
                value=data.get("value"),
                position=data.get("position"),
                actor=actor_name(request.user),
                reason=data["reason"],
                replay=data["replay"],
                skip_unseen=data["skip_unseen"],
                source=WatermarkSource.API,
            )
            job = self.get_queryset().get(pk=job.pk)
        return Response(s.WatermarkStateSerializer(_watermark_state(job)).data)

    @extend_schema(
        summary="The job's watermark events, newest first",
        responses=with_errors({200: s.WatermarkEventSerializer(many=True)}, 404),
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
