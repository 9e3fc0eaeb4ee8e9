"""Auth endpoints: the local issuer's token and JWKS (local mode only), the server's auth
configuration for the CLI, and `whoami`."""
from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from ..emails import MAX_EMAIL_CHARS
from ..issuer import local_issuer


LOCAL_ONLY = OpenApiResponse(description="The local issuer is off: this server authenticates "
                                        "with Cloudflare Access.")


def _require_local_mode() -> None:
    if settings.FALCON_AUTH_MODE != "local":
        raise NotFound("The local issuer is off: this server authenticates with Cloudflare "
                       "Access.")


class LocalTokenInputSerializer(serializers.Serializer):
    # The same limit as accounts.emails.normalize_email (RFC 5321), so the schema states it.
    email = serializers.EmailField(max_length=MAX_EMAIL_CHARS)


class LocalTokenOutputSerializer(serializers.Serializer):
    token = serializers.CharField()
    token_type = serializers.CharField()
    expires_at = serializers.IntegerField(help_text="Seconds since the epoch.")
    email = serializers.EmailField()


class LocalTokenView(APIView):
    """Issue a token for an email from the embedded local issuer (local mode only)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=LocalTokenInputSerializer,
                   responses={201: LocalTokenOutputSerializer, 404: LOCAL_ONLY},
                   summary="Issue a local-mode token")
    def post(self, request):
        _require_local_mode()
        data = LocalTokenInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        from ..emails import InvalidEmail, normalize_email

        try:
            email = normalize_email(data.validated_data["email"])
        except InvalidEmail as exc:
            raise serializers.ValidationError({"email": [str(exc)]}) from None
        issued = local_issuer().issue(email, ttl_seconds=settings.FALCON_LOCAL_TOKEN_TTL_SECONDS)
        out = {"token": issued.token, "token_type": "Bearer", "expires_at": issued.expires_at,
               "email": email}
        return Response(LocalTokenOutputSerializer(out).data, status=status.HTTP_201_CREATED)


class LocalJWKSView(APIView):
    """The local issuer's JSON Web Key Set (RFC 7517), for verifiers in other processes."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict, 404: LOCAL_ONLY}, summary="Local issuer JWKS")
    def get(self, request):
        _require_local_mode()
        return Response(local_issuer().jwks())


class AuthConfigSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["local", "cloudflare"])
    login_url = serializers.CharField(
        help_text="Path of the page that hands a token to `falcon auth login`: the local "
                  "issuer's token endpoint (POST) in the local mode, the Access-protected "
                  "browser page in the cloudflare mode.")


class AuthConfigView(APIView):
    """How to log in to this server (`falcon auth login` picks its flow from `mode`).

    Open to anyone: it reveals only the mode and a path. Behind Cloudflare Access the edge may
    still demand a login for it; the CLI then falls back to the cloudflare flow.
    """

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: AuthConfigSerializer}, summary="Auth configuration")
    def get(self, request):
        if settings.FALCON_AUTH_MODE == "cloudflare":
            data = {"mode": "cloudflare", "login_url": reverse("auth-cli-login")}
        else:
            data = {"mode": "local", "login_url": reverse("auth-token")}
        return Response(AuthConfigSerializer(data).data)


class WhoAmISerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["user", "service"])
    user_id = serializers.CharField(help_text="The user's `sub`, or `service:<common_name>`.")
    email = serializers.CharField(help_text="The user's email; empty for a service.")
    is_staff = serializers.BooleanField()


class WhoAmIView(APIView):
    """The authenticated user or service principal."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: WhoAmISerializer}, summary="Who am I")
    def get(self, request):
        from ..principals import ServiceIdentity

        who = request.user
        if isinstance(who, ServiceIdentity):
            data = {"kind": "service", "user_id": f"service:{who.name}", "email": "",
                    "is_staff": who.is_staff}
        else:
            data = {"kind": "user", "user_id": who.user_id, "email": who.email,
                    "is_staff": who.is_staff}
        return Response(WhoAmISerializer(data).data)
