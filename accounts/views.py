"""The browser page of `falcon auth login` in the cloudflare mode.

Flow ("Cloudflare Access + local server"): the CLI listens on a random loopback port and opens the
browser at `/auth/cli-login?port=<port>&state=<state>`. That page sits behind Cloudflare Access, so
by the time the request reaches Falcon the user has logged in and the edge has put their
application token in `Cf-Access-Jwt-Assertion`. The page verifies it (defence in depth, as every
request) and redirects the browser to
`http://127.0.0.1:<port>/callback?token=<token>&state=<state>`, where the CLI checks `state` and
caches the token.

The redirect target is built here from an integer port and the fixed loopback address, never from
a URL the caller supplies, so the token can only go to the caller's own machine (an open
redirect would hand it to anyone who can make a user click a link).
"""
from __future__ import annotations

import re
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpResponse, HttpResponseRedirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from rest_framework import exceptions

from core.numbers import BadNumber, parse_decimal

from .authentication import authenticate_token
from .models import User

LOOPBACK = "127.0.0.1"
STATE = re.compile(r"^[A-Za-z0-9_\-]{16,128}$")
MIN_PORT = 1024  # the CLI binds port 0: the kernel picks from the unprivileged range


def _refuse(status: int, reason: str) -> HttpResponse:
    """A one-line text answer for the browser (no token in it)."""
    response = HttpResponse(f"Falcon login: {reason}\n", status=status,
                            content_type="text/plain; charset=utf-8")
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_GET
@never_cache
def cli_login(request):
    """Hand the caller's verified Access token to the CLI listening on loopback `port`.

    Query:
        port: the CLI's loopback port, an integer in 1024..65535.
        state: the CLI's random value, 16-128 characters of `[A-Za-z0-9_-]`, echoed back so the
            CLI accepts only the answer to its own request.

    Returns:
        302 to `http://127.0.0.1:<port>/callback?token=...&state=...`; 404 outside the
        cloudflare mode (the local mode has its own token endpoint); 400 for a bad port or
        state; 401 without a valid `Cf-Access-Jwt-Assertion` or for a service token; 403 for a
        service token operators have not allowed.
    """
    if settings.FALCON_AUTH_MODE != "cloudflare":
        return _refuse(404, "this server does not use Cloudflare Access; run `falcon auth "
                            "login` without a browser")
    raw_port, state = request.GET.get("port", ""), request.GET.get("state", "")
    try:
        port = parse_decimal(raw_port, minimum=MIN_PORT, maximum=65535)
    except BadNumber:
        return _refuse(400, f"port must be an integer in {MIN_PORT}..65535 (ASCII digits)")
    if not STATE.fullmatch(state):
        return _refuse(400, "state must be 16-128 characters of letters, digits, '_' or '-'")
    token = (request.headers.get("Cf-Access-Jwt-Assertion") or "").strip()
    if not token:
        return _refuse(401, "no Cf-Access-Jwt-Assertion header: this page must be reached "
                            "through Cloudflare Access")
    try:
        principal, _claims = authenticate_token(token)
    except exceptions.APIException as exc:
        response = _refuse(exc.status_code, str(exc.detail))
        if getattr(exc, "wait", None):
            response["Retry-After"] = str(exc.wait)  # 503: the signing keys are unavailable
        return response
    if not isinstance(principal, User):
        return _refuse(401, "a service token cannot log in the CLI; use it directly")
    target = (f"http://{LOOPBACK}:{port}/callback?"
              + urlencode({"token": token, "state": state}))
    response = HttpResponseRedirect(target)
    # The token is in the Location: keep it out of referrers of the next page.
    response["Referrer-Policy"] = "no-referrer"
    return response
