"""drf-spectacular description of the access-JWT authentication (a bearer JWT)."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class AccessJWTScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.AccessJWTAuthentication"
    name = "accessJWT"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "An RS256 access JWT (Cloudflare Access, or the local issuer), "
                               "read from the `Cf-Access-Jwt-Assertion` header, the "
                               "`cf-access-token` header, the `CF_Authorization` cookie or "
                               "`Authorization: Bearer`, in that order."}


class LocalSessionScheme(OpenApiAuthenticationExtension):
    """The local mode's session login (browsable API), documented as Django's session cookie."""

    target_class = "accounts.authentication.LocalSessionAuthentication"
    name = "cookieAuth"
    match_subclasses = True

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid",
                "description": "Django's session (local mode only, after /api-auth/login/)."}
