"""/api/v1/ routes: connectors and jobs by name, batches and backfills by id."""

from rest_framework.routers import DefaultRouter

from inventory.api import views

# no `.json` suffix routes: `?format=` or the Accept header choose the format, and the views
# take no `format` argument (a suffix route made them fail with a 500)
router = DefaultRouter(trailing_slash=True)
router.include_format_suffixes = False
router.register("connectors", views.ConnectorViewSet, basename="connector")
router.register("jobs", views.JobViewSet, basename="job")
router.register("batches", views.BatchViewSet, basename="batch")
router.register("backfills", views.BackfillViewSet, basename="backfill")

app_name = "api"
urlpatterns = router.urls
