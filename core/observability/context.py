"""Who is acting and which request is being served, for the transition history and the logs.

Two context variables, set once per request by the interfaces and read by the code below them:

- the actor: who asked for a change. The HTTP middleware (`core.http.middleware.RequestContextMiddleware`)
  sets a resolver reading `request.user` when it is needed (DRF authenticates inside the view,
  after the middleware ran); the gRPC interceptor sets the authenticated principal's label
  (a user's email, `service <name>` or `internal service`, i.e. the controller identity). The
  transition engine (`core.domain.statemachine`) records it with every status change. Outside a
  request (a management command, a test) the actor is `system`.
- the request id: an incoming `X-Request-ID` (HTTP) or `x-request-id` (gRPC metadata) when it is
  a short printable token, else a new random one (32 hex digits); the logs carry it
  (`core.logging`) and the response returns it.

No Django imports: contextvars follow a thread and a request's call chain, never leak between
requests because each interface resets what it set.
"""
from __future__ import annotations

import contextvars
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core.observability.redaction import redact

SYSTEM_ACTOR = "system"
# What an incoming request id may be: printable ASCII without spaces, at most 128 characters
# (enough for a UUID or a trace id; anything else is replaced, never logged as sent).
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")

_actor: contextvars.ContextVar[str | Callable[[], str] | None] = contextvars.ContextVar(
    "falcon_actor", default=None)
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "falcon_request_id", default=None)


def set_actor(actor: str | Callable[[], str] | None) -> contextvars.Token:
    """Make `actor` (a label, or a callable returning one) current; returns the reset token."""
    return _actor.set(actor)


def reset_actor(token: contextvars.Token) -> None:
    """Restore the actor that was current before `set_actor`."""
    _actor.reset(token)


def current_actor() -> str:
    """Return the current actor's label (at most 255 characters), `system` when none is set."""
    actor = _actor.get()
    if callable(actor):
        actor = actor()
    return (actor or SYSTEM_ACTOR)[:255]


@contextmanager
def acting_as(actor: str | Callable[[], str] | None) -> Iterator[None]:
    """Run the block with `actor` current (admin actions, management commands, tests)."""
    token = set_actor(actor)
    try:
        yield
    finally:
        reset_actor(token)


def new_request_id(incoming: str | None = None) -> str:
    """Return `incoming` if it is a valid request id (`REQUEST_ID`), else a new random one."""
    if incoming and REQUEST_ID.match(incoming):
        if redact(incoming) == incoming:  # a credential sent as the id is never logged
            return incoming
    return uuid.uuid4().hex


def set_request_id(request_id: str | None) -> contextvars.Token:
    """Make `request_id` current; returns the token for `reset_request_id`."""
    return _request_id.set(request_id)


def reset_request_id(token: contextvars.Token) -> None:
    """Restore the request id that was current before `set_request_id`."""
    _request_id.reset(token)


def current_request_id() -> str | None:
    """Return the id of the request being served, or None outside a request."""
    return _request_id.get()
