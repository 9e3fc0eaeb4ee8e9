"""Non-user principals: callers that prove a machine identity, not a person.

A Cloudflare Access service token (`common_name` set, `sub` empty, no `email`) is never a `User`
row (decisions.md#auth-2). Once an operator allows it, it authenticates as a `ServiceIdentity`: a
small object shaped enough like a Django user for DRF (`is_authenticated`) and for the services'
authorization rules (`is_staff`), with no database row behind it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceIdentity:
    """An authenticated service.

    Attributes:
        name: the Cloudflare service token's `common_name` (its client id), or `internal` for
            the local mode's internal gRPC token.
        is_staff: True only for the internal token of the local mode (Falcon's own controllers);
            Cloudflare service principals are never staff, so they may read but not abort or
            delete other people's experiments.
        internal: True for the local mode's internal gRPC token, which may act for a named
            user (gRPC CreateExp `creator_email`).
        roles: the service roles (`accounts.grpc_auth.ROLE_METHODS` keys) that decide which
            gRPC methods it may call; `read-only` for a token no operator gave a role.
    """

    name: str
    is_staff: bool = False
    internal: bool = False
    roles: frozenset = frozenset({"read-only"})

    # What DRF and Django's auth machinery ask of `request.user`.
    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_superuser = False
    pk = None

    @property
    def label(self) -> str:
        """How messages and logs name this caller, e.g. `service 0123abcd.access`."""
        return "internal service" if self.internal else f"service {self.name}"

    @property
    def email(self) -> str:
        """Services have no email: '' (Cloudflare Access gives an email only to people)."""
        return ""

    def get_username(self) -> str:
        """Return the label (Django's user protocol)."""
        return self.label

    def __str__(self) -> str:
        return self.label


INTERNAL_SERVICE = ServiceIdentity(
    name="internal", is_staff=True, internal=True,
    roles=frozenset({"exp-controller", "resource-manager", "analyzer", "maintenance"}))
"""The caller proven by `FALCON_INTERNAL_TOKEN` (local mode only): Falcon's own controllers."""


def actor_label(actor) -> str:
    """Name an actor (a `User` or a `ServiceIdentity`) for messages: email or service label."""
    if isinstance(actor, ServiceIdentity):
        return actor.label
    return getattr(actor, "email", "") or str(actor)
