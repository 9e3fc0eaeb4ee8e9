"""`GET /api/v1/`: the API's root, a map of its collections (the landing page links here)."""
from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

# Route name -> what a reader finds there. Only collections and entry points: an object's own
# URL comes in the collection's rows.
ROUTES = {
    "exps": "exp-list",
    "exps_diff": "exp-diff",
    "analyses": "analysis-list",
    "plugins": "plugin-list",
    "auth_config": "auth-config",
    "whoami": "auth-whoami",
    "schema": "schema",
    "docs": "swagger-ui",
}


class ApiRootView(APIView):
    """Name each collection of the API with its URL.

    Open to anyone, like the schema: it reveals only paths. Every collection it names still
    needs a token.
    """

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(summary="API root", responses={200: inline_serializer(
        "ApiRoot", {name: serializers.CharField() for name in ROUTES})})
    def get(self, request):
        return Response({name: request.build_absolute_uri(reverse(route))
                         for name, route in ROUTES.items()})
