"""Routes: the admin, the REST API with its schema and docs, metrics, login, the dashboard."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from inventory.api.metrics import metrics_view


class LoginView(auth_views.LoginView):
    """Session login for the dashboard, the API's browsable docs and the admin alike."""

    template_name = "registration/login.html"  # the dashboard's look, not the admin's


def favicon(request):
    """Browsers ask for /favicon.ico whatever the page says: the static file's (hashed) URL."""
    return redirect(static("favicon.ico"), permanent=True)


def not_found(request, exception=None):
    """A path under /api/ that no endpoint serves is answered as the API answers, in JSON."""
    if request.path_info.startswith("/api/"):
        return JsonResponse({"detail": f"no API endpoint at {request.path_info}"}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if request.path_info.startswith("/api/"):
        return JsonResponse({"detail": "server error; it is logged"}, status=500)
    return defaults.server_error(request)


handler404 = not_found
handler500 = server_error

urlpatterns = [
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("inventory.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        # the split view serves its start-up script as a file: no inline script (the CSP)
        login_required(SpectacularSwaggerSplitView.as_view(url_name="schema")),
        name="api-docs",
    ),
    path("metrics", metrics_view, name="metrics"),
    path("", include("inventory.urls")),  # the dashboard
]
