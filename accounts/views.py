"""The browser page of `falcon auth login` in the cloudflare mode, and its redeem endpoint.

Flow (decisions.md#auth-12; RFC 8252 "OAuth 2.0 for Native Apps" with RFC 7636 PKCE):

1. The CLI listens on a random loopback port, makes a one-time `state`, a random `verifier`
   (kept to itself) and a human `code` it prints, and opens
   `/auth/cli-login?port=&state=&challenge=BASE64URL(SHA256(verifier))&code=XXXX-XXXX`.
2. That page sits behind Cloudflare Access, so the request carries the user's verified
   identity in `Cf-Access-Jwt-Assertion`. A GET only shows "Send your Falcon login to the CLI
   on 127.0.0.1:PORT that shows code XXXX-XXXX?" and a Confirm button: a link alone hands
   nothing over.
3. Confirm is a same-origin POST with Django's CSRF token (`CsrfViewMiddleware`). It stores a
   one-time grant of the user's token bound to (state, challenge), valid 120 s
   (`accounts.cli_login`), and answers 303 to `http://127.0.0.1:PORT/callback?state=&grant=`:
   the grant id, never the token.
4. The CLI POSTs `{grant, state, verifier}` to `/auth/cli-login/redeem` and receives the token in
   the response body. The server checks `S256(verifier) == challenge` once, before the expiry.

No token is ever put in a URL (browser history, referrers, proxy logs). The loopback target is
built from an integer port and the fixed loopback address, never from a URL the caller supplies.
"""
from __future__ import annotations

import json
import logging
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpResponse, HttpResponseRedirect, JsonResponse
from django.middleware.csrf import get_token
from django.utils.html import format_html
from django.views.decorators.cache import never_cache
from django.views.decorators.clickjacking import xframe_options_deny
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods, require_POST
from rest_framework import exceptions

from core.limits.numbers import BadNumber, parse_decimal

from .authentication import authenticate_token
from .cli_login import (CHALLENGE, CODE, STATE, GrantRefused, grant_create, grant_redeem,
                        grant_sweep)
from .models import User

logger = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
MIN_PORT = 1024  # the CLI binds port 0: the kernel picks from the unprivileged range


def _refuse(status: int, reason: str) -> HttpResponse:
    """A one-line text answer for the browser (no token in it)."""
    response = HttpResponse(f"Falcon login: {reason}\n", status=status,
                            content_type="text/plain; charset=utf-8")
    response["Referrer-Policy"] = "no-referrer"
    return response


class _Refused(Exception):
    def __init__(self, response: HttpResponse):
        self.response = response


def _login_request(request, params) -> tuple[int, str, str, str, User, str]:
    """Check the login's fields and the Access identity; return (port, state, challenge, code,
    user, token).

    Raises:
        _Refused: with the answer (400 naming the field, 401/403/503 for the identity).
    """
    if settings.FALCON_AUTH_MODE != "cloudflare":
        raise _Refused(_refuse(404, "this server does not use Cloudflare Access; run `falcon "
                                    "auth login` without a browser"))
    try:
        port = parse_decimal(params.get("port", ""), minimum=MIN_PORT, maximum=65535)
    except BadNumber:
        raise _Refused(_refuse(400, f"port must be an integer in {MIN_PORT}..65535 (ASCII "
                                    "digits)")) from None
    state, challenge = params.get("state", ""), params.get("challenge", "")
    code = params.get("code", "")
    if not STATE.fullmatch(state):
        raise _Refused(_refuse(400, "state must be 16-128 characters of letters, digits, '_' "
                                    "or '-'"))
    if not CHALLENGE.fullmatch(challenge):
        raise _Refused(_refuse(400, "challenge must be BASE64URL(SHA256(verifier)), 43 "
                                    "characters (RFC 7636 S256); update the falcon CLI"))
    if not CODE.fullmatch(code):
        raise _Refused(_refuse(400, "code must be the XXXX-XXXX code the CLI prints; update "
                                    "the falcon CLI"))
    token = (request.headers.get("Cf-Access-Jwt-Assertion") or "").strip()
    if not token:
        raise _Refused(_refuse(401, "no Cf-Access-Jwt-Assertion header: this page must be "
                                    "reached through Cloudflare Access"))
    try:
        principal, _claims = authenticate_token(token)
    except exceptions.APIException as exc:
        response = _refuse(exc.status_code, str(exc.detail))
        if getattr(exc, "wait", None):
            response["Retry-After"] = str(exc.wait)  # 503: the signing keys are unavailable
        raise _Refused(response) from None
    if not isinstance(principal, User):
        raise _Refused(_refuse(401, "a service token cannot log in the CLI; use it directly"))
    return port, state, challenge, code, principal, token


PAGE = """<!doctype html><html lang="en"><meta charset="utf-8"><title>Falcon CLI login</title>
<h1>Falcon CLI login</h1>
<p>Send your Falcon login (<b>{email}</b>) to the CLI on <b>{host}:{port}</b> that shows code
<b>{code}</b>?</p>
<p>Confirm only if you just ran <code>falcon auth login</code> on this machine and your terminal
shows this code. Otherwise close this tab.</p>
<form method="post" action="{action}">
<input type="hidden" name="csrfmiddlewaretoken" value="{csrf}">
<input type="hidden" name="port" value="{port}">
<input type="hidden" name="state" value="{state}">
<input type="hidden" name="challenge" value="{challenge}">
<input type="hidden" name="code" value="{code}">
<button type="submit">Confirm</button>
</form></html>
"""


def _page_headers(response: HttpResponse, port: int) -> HttpResponse:
    response["Referrer-Policy"] = "no-referrer"
    # No framing (a click on a hidden frame is a confirmation); the form may only post here
    # and be redirected to the CLI's listener (CSP `form-action` covers the redirect).
    response["Content-Security-Policy"] = (
        f"default-src 'none'; form-action 'self' http://{LOOPBACK}:{port}; "
        "frame-ancestors 'none'; base-uri 'none'")
    return response


@require_http_methods(["GET", "HEAD", "POST"])
@never_cache
@xframe_options_deny
@csrf_protect
def cli_login(request):
    """Ask the user to confirm the CLI login (GET), then grant it (POST).

    Query (GET) or form (POST):
        port: the CLI's loopback port, an integer in 1024..65535.
        state: the CLI's one-time value, 16-128 characters of `[A-Za-z0-9_-]`.
        challenge: `BASE64URL(SHA256(verifier))` (RFC 7636 S256), 43 characters.
        code: the `XXXX-XXXX` code the CLI prints, shown so the user can compare.

    Returns:
        GET: 200, the confirmation page (a CSRF-protected form); nothing is handed over.
        POST: 303 to `http://127.0.0.1:<port>/callback?state=...&grant=...` (a one-time grant
        id, never the token); 403 without a valid CSRF token or same-origin `Origin`.
        Both: 404 outside the cloudflare mode; 400 naming a bad field; 401 without a valid
        `Cf-Access-Jwt-Assertion` or for a service token; 403 for a service token operators
        have not allowed; 503 with `Retry-After` while the signing keys are unavailable.
    """
    params = request.POST if request.method == "POST" else request.GET
    try:
        port, state, challenge, code, user, token = _login_request(request, params)
    except _Refused as refused:
        return refused.response
    grant_sweep()  # expired grants go whenever the login page is used, confirmed or not
    if request.method != "POST":
        body = format_html(PAGE, email=user.email, host=LOOPBACK, port=port, code=code,
                           action=request.path, csrf=get_token(request), state=state,
                           challenge=challenge)
        return _page_headers(HttpResponse(body, content_type="text/html; charset=utf-8"), port)
    grant = grant_create(state=state, challenge=challenge, token=token, user_id=user.pk)
    logger.info("CLI login confirmed for user %s, loopback port %d", user.pk, port)
    target = f"http://{LOOPBACK}:{port}/callback?" + urlencode({"state": state, "grant": grant})
    response = HttpResponseRedirect(target, status=303)  # See Other: the browser GETs it
    return _page_headers(response, port)


def _json(status: int, body: dict) -> JsonResponse:
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"  # RFC 6749 section 5.1: token answers
    response["Pragma"] = "no-cache"
    return response


@csrf_exempt  # no cookie authenticates it: the verifier, which only the CLI holds, does
@require_POST
def cli_login_redeem(request):
    """Hand the token of a confirmed CLI login to the CLI that started it.

    Body (JSON): `{"grant", "state", "verifier"}`: the grant id the listener received, the
    CLI's `state`, and the verifier whose S256 the login page was given.

    Returns:
        200 `{"token", "token_type": "Bearer"}`, once per grant, within 120 s of the
        confirmation; 400 `{"detail", "code": "invalid_grant"}` naming the field otherwise;
        404 outside the cloudflare mode.
    """
    if settings.FALCON_AUTH_MODE != "cloudflare":
        return _json(404, {"detail": "this server does not use Cloudflare Access; run `falcon "
                                     "auth login` without a browser", "code": "not_found"})
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python recurses
        body = None
    if not isinstance(body, dict):
        return _json(400, {"detail": "the body must be a JSON object {grant, state, verifier}",
                           "code": "invalid_grant"})
    fields = {name: body.get(name) for name in ("grant", "state", "verifier")}
    for name, value in fields.items():
        if not isinstance(value, str):
            return _json(400, {"detail": f"{name} is required (a string)",
                               "code": "invalid_grant"})
    try:
        token = grant_redeem(grant_id=fields["grant"], state=fields["state"],
                             verifier=fields["verifier"])
    except GrantRefused as exc:
        return _json(400, {"detail": str(exc), "code": "invalid_grant"})
    return _json(200, {"token": token, "token_type": "Bearer"})
