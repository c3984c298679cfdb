from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from accounts.api import MeApi
from config.health import healthz, readyz
from inbox.metrics import metrics_view

admin.site.site_header = "Inbox administration"
admin.site.site_title = "Inbox admin"

urlpatterns = [
    # Operations: probes and Prometheus metrics (docs/OPERATIONS.md).
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    # The API before the pages: Django tries the patterns in order, and the API's calls are
    # the most frequent requests (no page's pattern begins with api/, so none is hidden).
    path("api/inbox/", include("inbox.api_urls")),
    path("api/processes/", include("processes.urls")),
    path("api/me/", MeApi.as_view(), name="api-me"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("", include("inbox.urls")),
    path("accounts/", include("allauth.urls")),
    path("team/", include("accounts.urls")),
    path("team/processes/", include("processes.page_urls")),
    path("admin/", admin.site.urls),
    # Browsers ask for /favicon.ico on pages that name no icon (the admin's).
    path("favicon.ico", RedirectView.as_view(url=f"{settings.STATIC_URL}inbox/favicon.svg")),
]

# Under /api/, an unknown URL (a task id that is not a UUID), a request Django refuses (too
# large, malformed) and a server error answer JSON like the API; pages keep their pages.
handler400 = "config.api.bad_request"
handler404 = "config.api.not_found"
handler500 = "config.api.server_error"
