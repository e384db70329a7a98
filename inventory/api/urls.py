"""/api/v1/ routes: connectors and jobs by name, batches and backfills by id."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from inventory.api import auth, freshness, health, restatements, views

# no `.json` suffix routes: `?format=` or the Accept header choose the format, and the views
# take no `format` argument (a suffix route made them fail with a 500)
router = DefaultRouter(trailing_slash=True)
router.include_format_suffixes = False
router.register("connectors", views.ConnectorViewSet, basename="connector")
router.register("jobs", views.JobViewSet, basename="job")
router.register("batches", views.BatchViewSet, basename="batch")
router.register("backfills", views.BackfillViewSet, basename="backfill")

app_name = "api"
urlpatterns = [
    path("auth/token/", auth.TokenView.as_view(), name="auth-token"),
    path("alerts/", health.AlertsView.as_view(), name="alerts"),
    path("backfill-throttle/", health.BackfillThrottleView.as_view(), name="backfill-throttle"),
    path(
        "backfill-throttle/freshness/",
        freshness.FreshnessThrottleView.as_view(),
        name="freshness-throttle",
    ),
    path("jobs/<slug:name>/gaps/", health.JobGapsView.as_view(), name="job-gaps"),
    path(
        "jobs/<slug:name>/gaps/backfill/",
        health.JobHolesBackfillView.as_view(),
        name="job-gaps-backfill",
    ),
    path(
        "jobs/<slug:name>/restatements/",
        restatements.JobRestatementsView.as_view(),
        name="job-restatements",
    ),
    path(
        "jobs/<slug:name>/restatements/<int:pk>/",
        restatements.RestatementView.as_view(),
        name="job-restatement",
    ),
    path(
        "jobs/<slug:name>/restatements/<int:pk>/apply/",
        restatements.RestatementApplyView.as_view(),
        name="job-restatement-apply",
    ),
    path(
        "jobs/<slug:name>/restatements/<int:pk>/dismiss/",
        restatements.RestatementDismissView.as_view(),
        name="job-restatement-dismiss",
    ),
    *router.urls,
]
