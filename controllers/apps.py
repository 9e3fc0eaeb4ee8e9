from django.apps import AppConfig


class ControllersConfig(AppConfig):
    """Controllers: runcontroller, the exp controller, the resource manager, cluster backends."""

    name = "controllers"
