"""Browser pages of the accounts app (outside the JSON API)."""
from django.urls import path

from . import views

urlpatterns = [
    path("cli-login", views.cli_login, name="auth-cli-login"),
]
