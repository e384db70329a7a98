"""The dashboard's pages."""

from django.urls import path

from inventory import views, views_edit, views_restatements

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("new/job/", views_edit.job_new, name="job-new"),
    path("new/connector/", views_edit.connector_new, name="connector-new"),
    path("jobs/<slug:name>/", views.job_detail, name="job"),
    path("jobs/<slug:name>/edit/", views_edit.job_edit, name="job-edit"),
    path("jobs/<slug:name>/batches/", views.job_batches_partial, name="job-batches"),
    path("jobs/<slug:name>/run/", views.job_run_now, name="job-run"),
    path("jobs/<slug:name>/gaps/", views.job_gaps, name="job-gaps"),
    path("jobs/<slug:name>/gaps/backfill/", views.job_gaps_backfill, name="job-gaps-backfill"),
    path(
        "jobs/<slug:name>/restatements/<int:pk>/<str:action>/",
        views_restatements.restatement_action,
        name="restatement-action",
    ),
    path("jobs/<slug:name>/<str:action>/", views.job_pause_resume, name="job-action"),
    path("connectors/", views.connectors, name="connectors"),
    path("connectors/<slug:name>/edit/", views_edit.connector_edit, name="connector-edit"),
    path("connectors/<slug:name>/<str:action>/", views.connector_action, name="connector-action"),
    path("backfills/", views.backfills, name="backfills"),
    path("backfills/throttle/", views_edit.throttle_set, name="throttle-set"),
    path("backfills/preview/", views.backfill_preview, name="backfill-preview"),
    path("backfills/<int:pk>/<str:action>/", views.backfill_action, name="backfill-action"),
    path("batches/<int:pk>/", views.batch_detail, name="batch"),
    path("batches/<int:pk>/<str:action>/", views.batch_action, name="batch-action"),
]
