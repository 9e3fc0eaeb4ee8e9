from django.urls import path

from . import views

urlpatterns = [
    path("token", views.LocalTokenView.as_view(), name="auth-token"),
    path("jwks", views.LocalJWKSView.as_view(), name="auth-jwks"),
    path("config", views.AuthConfigView.as_view(), name="auth-config"),
    path("whoami", views.WhoAmIView.as_view(), name="auth-whoami"),
]
