"""Browser pages of the accounts app (outside the JSON API), and the CLI login's redeem."""
from django.urls import path

from . import views

urlpatterns = [
    path("cli-login", views.cli_login, name="auth-cli-login"),
    path("cli-login/redeem", views.cli_login_redeem, name="auth-cli-login-redeem"),
]
