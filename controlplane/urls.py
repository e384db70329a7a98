"""Routes: the admin, the REST API with its schema and docs, metrics, login, the dashboard."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from inventory.api.metrics import metrics_view


class LoginView(auth_views.LoginView):
    """Session login for the dashboard, the API's browsable docs and the admin alike."""

    def get_template_names(self):
        # the dashboard's own template when it has one, else the admin's login page
        return ["registration/login.html", "admin/login.html"]

    def get_context_data(self, **kwargs):
        return {**admin.site.each_context(self.request), **super().get_context_data(**kwargs)}


def favicon(request):
    """Browsers ask for /favicon.ico whatever the page says: the static file's (hashed) URL."""
    return redirect(static("favicon.ico"), permanent=True)


urlpatterns = [
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("inventory.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        login_required(SpectacularSwaggerView.as_view(url_name="schema")),
        name="api-docs",
    ),
    path("metrics", metrics_view, name="metrics"),
    path("", include("inventory.urls")),  # the dashboard
]
