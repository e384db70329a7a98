"""The dashboard's pages."""

from django.urls import path

from inventory.views import (
    backfills,
    batches,
    connectors,
    deleting,
    edit,
    freshness,
    graph,
    jobs,
    overview,
    restatements,
)

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("new/job/", edit.job_new, name="job-new"),
    path("new/connector/", edit.connector_new, name="connector-new"),
    path("jobs/<slug:name>/", jobs.job_detail, name="job"),
    path("jobs/<slug:name>/edit/", edit.job_edit, name="job-edit"),
    path("jobs/<slug:name>/delete/", deleting.job_delete, name="job-delete"),
    path("jobs/<slug:name>/batches/", jobs.job_batches_partial, name="job-batches"),
    path("jobs/<slug:name>/run/", jobs.job_run_now, name="job-run"),
    path("jobs/<slug:name>/gaps/", jobs.job_gaps, name="job-gaps"),
    path("jobs/<slug:name>/gaps/backfill/", jobs.job_gaps_backfill, name="job-gaps-backfill"),
    path(
        "jobs/<slug:name>/restatements/<int:pk>/<str:action>/",
        restatements.restatement_action,
        name="restatement-action",
    ),
    path("jobs/<slug:name>/<str:action>/", jobs.job_pause_resume, name="job-action"),
    path("graph/", graph.pipeline_graph, name="graph"),
    path("connectors/", connectors.connectors, name="connectors"),
    path("connectors/<slug:name>/edit/", edit.connector_edit, name="connector-edit"),
    path("connectors/<slug:name>/delete/", deleting.connector_delete, name="connector-delete"),
    path(
        "connectors/<slug:name>/<str:action>/", connectors.connector_action, name="connector-action"
    ),
    path("backfills/", backfills.backfills, name="backfills"),
    path("backfills/throttle/", edit.throttle_set, name="throttle-set"),
    path("backfills/throttle/pin/", freshness.throttle_pin, name="throttle-pin"),
    path("backfills/preview/", backfills.backfill_preview, name="backfill-preview"),
    path("backfills/<int:pk>/<str:action>/", backfills.backfill_action, name="backfill-action"),
    path("batches/<int:pk>/", batches.batch_detail, name="batch"),
    path("batches/<int:pk>/<str:action>/", batches.batch_action, name="batch-action"),
]
