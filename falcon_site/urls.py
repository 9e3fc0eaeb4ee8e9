"""URL routes: a landing page at /, the API under /api/v1/, OpenAPI schema and docs, the admin,
the CLI's browser login page, health checks, Prometheus metrics."""
from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import TemplateView

from experiments.api import urls as _exp_urls  # noqa: F401  (registers the `id` converter)
from experiments.api.events import ExpEventsView, bad_events_exp_id
from analysis.api.compare import ExpCompareView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import health
from .api_root import ApiRootView

# The admin's lists must fit a 1400-pixel screen: no app sidebar beside them (the breadcrumbs
# and the index page link every model).
admin.site.enable_nav_sidebar = False
admin.site.site_header = "Falcon administration"
admin.site.site_title = "Falcon admin"
admin.site.site_url = "/"

urlpatterns = [
    path("", TemplateView.as_view(template_name="falcon_site/landing.html"), name="landing"),
    path("admin/", admin.site.urls),
    # Before the experiments' routes, whose `exps/<raw>` would answer 400 for it.
    path("api/v1/exps/compare", ExpCompareView.as_view(), name="exp-compare"),
    path("api/v1/exps/<id:exp_id>/events", ExpEventsView.as_view(), name="exp-events"),
    re_path(r"^api/v1/exps/(?P<raw>[^/]+)/events$", bad_events_exp_id),
    path("api/v1/", ApiRootView.as_view(), name="api-root"),
    path("api/v1/", include("experiments.api.urls")),
    path("api/v1/", include("analysis.api.urls")),
    path("api/v1/auth/", include("accounts.api.urls")),
    path("auth/", include("accounts.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api-auth/", include("rest_framework.urls")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
]

handler404 = "core.http.drf.not_found"
handler500 = "core.http.drf.internal_error"
