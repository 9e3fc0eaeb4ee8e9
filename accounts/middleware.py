"""Log staff into the Django admin from the Cloudflare Access identity of each request.

Behind Access every request to the origin carries `Cf-Access-Jwt-Assertion` (Cloudflare
"Validate JWTs"); the credential is picked as for the API (`accounts.verifier.credential_from`).
On admin pages in the cloudflare mode this middleware makes the session follow
that header, as Django's `RemoteUserMiddleware` does with `REMOTE_USER`:

- a verified token of another identity than the session's -> log that user in (a session, so
  the admin's CSRF and messages work as usual);
- no header, or a refused token -> log out, so a session never outlives the Access identity
  that opened it;
- a session made another way (a local-mode password) -> log out at once, and in the local
  mode a session made through Access is logged out (decisions.md#auth-11).

It acts on the admin only: API requests authenticate per request (`AccessJWTAuthentication`),
and writing a session row for each of them would be pure cost.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib import auth
from django.http import HttpResponse
from django.urls import NoReverseMatch, reverse

from core.processes.ports import is_loopback

BACKEND = "accounts.auth_backends.CloudflareAccessBackend"


class CloudflareAccessAdminMiddleware:
    """See the module docstring. Must come after `AuthenticationMiddleware`."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if (settings.FALCON_AUTH_MODE != "cloudflare" and request.user.is_authenticated
                and request.session.get(auth.BACKEND_SESSION_KEY) == BACKEND):
            auth.logout(request)  # a session opened through Access is not valid in another mode
        if settings.FALCON_AUTH_MODE == "cloudflare" and self._is_admin(request.path_info):
            from .authentication import KeysUnavailableError

            try:
                self._sync_session(request)
            except KeysUnavailableError as exc:
                response = HttpResponse(f"{exc.detail}\n", status=503,
                                        content_type="text/plain; charset=utf-8")
                response["Retry-After"] = str(exc.wait)
                return response
        return self.get_response(request)

    @staticmethod
    def _is_admin(path: str) -> bool:
        try:
            return path.startswith(reverse("admin:index"))
        except NoReverseMatch:
            return False

    @staticmethod
    def _sync_session(request) -> None:
        from .authentication import credential_from_request

        # The API's credential precedence (`accounts.verifier.credential_from`); a cookie is
        # safe here because Django's `CsrfViewMiddleware` guards every admin form.
        credential = credential_from_request(request)
        token = credential.token if credential is not None else ""
        current = request.user
        if current.is_authenticated and request.session.get(auth.BACKEND_SESSION_KEY) != BACKEND:
            # A password session from the local mode: never valid behind Access.
            auth.logout(request)
            current = request.user
        if not token:
            if current.is_authenticated:
                auth.logout(request)
            return
        user = auth.authenticate(request, cf_access_token=token)
        if user is not None and not user.is_staff:
            user = None  # only staff use the admin: no session for anyone else
        if user is None:
            if current.is_authenticated:
                auth.logout(request)
            return
        if current.is_authenticated and current.pk == user.pk:
            return
        auth.login(request, user, backend=BACKEND)


class LocalModeLoopbackOnlyMiddleware:
    """In the local mode, answer only loopback peers (decisions.md#auth-10).

    `ALLOWED_HOSTS` checks the `Host` header, which the client writes: on a non-loopback bind
    `Host: localhost` gets past it. The peer address (`REMOTE_ADDR`, set by the server from the
    socket) cannot be forged that way, so in the local mode a request from a non-loopback peer
    is refused with 403 unless FALCON_LOCAL_ALLOW_NONLOOPBACK is set. Other modes: no effect.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if (settings.FALCON_AUTH_MODE == "local" and not settings.FALCON_LOCAL_ALLOW_NONLOOPBACK
                and not is_loopback(request.META.get("REMOTE_ADDR") or "")):
            return HttpResponse("Falcon runs in the local mode and answers this machine only; "
                                "set FALCON_LOCAL_ALLOW_NONLOOPBACK=1 to serve a trusted "
                                "network.\n", status=403,
                                content_type="text/plain; charset=utf-8")
        return self.get_response(request)
