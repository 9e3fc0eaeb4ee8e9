"""Auth endpoints: the local issuer's token and JWKS (local mode only), and `whoami`."""
from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from ..issuer import local_issuer


def _require_local_mode() -> None:
    if settings.FALCON_AUTH_MODE != "local":
        raise NotFound("The local issuer is off: this server authenticates with Cloudflare "
                       "Access.")


class LocalTokenInputSerializer(serializers.Serializer):
    email = serializers.EmailField(max_length=255)


class LocalTokenOutputSerializer(serializers.Serializer):
    token = serializers.CharField()
    token_type = serializers.CharField()
    expires_at = serializers.IntegerField(help_text="Seconds since the epoch.")
    email = serializers.EmailField()


class LocalTokenView(APIView):
    """Issue a token for an email from the embedded local issuer (local mode only)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=LocalTokenInputSerializer, responses={201: LocalTokenOutputSerializer},
                   summary="Issue a local-mode token")
    def post(self, request):
        _require_local_mode()
        data = LocalTokenInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        email = data.validated_data["email"]
        issued = local_issuer().issue(email, ttl_seconds=settings.FALCON_LOCAL_TOKEN_TTL_SECONDS)
        out = {"token": issued.token, "token_type": "Bearer", "expires_at": issued.expires_at,
               "email": email}
        return Response(LocalTokenOutputSerializer(out).data, status=status.HTTP_201_CREATED)


class LocalJWKSView(APIView):
    """The local issuer's JSON Web Key Set (RFC 7517), for verifiers in other processes."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict}, summary="Local issuer JWKS")
    def get(self, request):
        _require_local_mode()
        return Response(local_issuer().jwks())


class WhoAmISerializer(serializers.Serializer):
    user_id = serializers.CharField()
    email = serializers.EmailField()
    is_staff = serializers.BooleanField()


class WhoAmIView(APIView):
    """The authenticated user."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: WhoAmISerializer}, summary="Who am I")
    def get(self, request):
        return Response(WhoAmISerializer(request.user).data)
