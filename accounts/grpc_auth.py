"""Who is calling the gRPC API: the internal token (local mode), a user or a service token.

Every call except gRPC health and reflection carries a token (checked by
`falcon_site.grpc.interceptors`), looked for in the metadata keys
`cf-access-jwt-assertion`, `cf-access-token` and `authorization: Bearer <token>`, in that
order (`accounts.verifier.credential_from`, as on HTTP, where only the cookie comes after
them). It is either

- `settings.FALCON_INTERNAL_TOKEN`, the shared secret of the controllers (they
  reach data only through the API server), compared in constant time and accepted in the LOCAL
  mode only (in production services use Cloudflare service tokens, docs/decisions.md#dec-auth); or
- an RS256 access JWT accepted by `accounts.verifier.default_verifier()` (Cloudflare Access or the
  local issuer): a person's, whose user is auto-registered as on HTTP, or an
  operator-allowed Cloudflare service token (`accounts.services.principal_from_claims`).

The principal of the current call is kept in a context variable for the servicers that need it
(CreateExp's creator, AbortExp's and DeleteExp's actor).
"""
from __future__ import annotations

import contextvars
import hmac
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from accounts.principals import INTERNAL_SERVICE, ServiceIdentity
from core.errors import NotFound, PermissionDenied, ValidationFailed

log = logging.getLogger(__name__)


class AuthenticationFailed(Exception):
    """The call carries no usable credentials; `reason` is safe to return and to log."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of one gRPC call.

    Attributes:
        kind: `service` (the internal token or a Cloudflare service token) or `user`.
        user: the `accounts.User` for a `user` principal; None for a service.
        service: the `accounts.principals.ServiceIdentity` of a `service` principal.
    """

    kind: str
    user: Any = None
    service: ServiceIdentity | None = None

    @property
    def actor(self):
        """The `User` or `ServiceIdentity` the services' authorization rules judge."""
        return self.user if self.user is not None else self.service

    @property
    def name(self) -> str:
        """A label for messages and logs: the user's email, or the service's label."""
        if self.user is not None:
            return self.user.email
        return self.service.label if self.service is not None else "unknown service"


SERVICE = Principal(kind="service", service=INTERNAL_SERVICE)
_current: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "falcon_grpc_principal", default=None)


def _metadata_getter(metadata: Any):
    """Return a function reading the first string value of a metadata key (lower-case)."""
    values: dict[str, str] = {}
    for key, value in metadata or ():
        if isinstance(key, str) and isinstance(value, str):
            values.setdefault(key.lower(), value)
    return values.get


def bearer_token(metadata: Any) -> str | None:
    """Return the call's access token, or None (order: `accounts.verifier.credential_from`).

    Args:
        metadata: the call's invocation metadata, a sequence of `(key, value)` pairs.
    """
    from accounts.verifier import token_from

    return token_from(_metadata_getter(metadata))


def authenticate(metadata: Any) -> Principal:
    """Return the principal the call's token proves.

    Raises:
        AuthenticationFailed: no token; the internal token outside the local mode; or neither
            the internal token nor a valid access JWT naming a user or an allowed service (with
            the verifier's one-line reason; the token is never logged).
        core.errors.PermissionDenied: a valid service token operators have not allowed.
        accounts.verifier.KeysUnavailable: no signing key can be had now (UNAVAILABLE).
    """
    token = bearer_token(metadata)
    if token is None:
        raise AuthenticationFailed("missing 'authorization: Bearer <token>' metadata")
    internal = settings.FALCON_INTERNAL_TOKEN
    if internal and hmac.compare_digest(token.encode(), internal.encode()):
        if settings.FALCON_AUTH_MODE != "local":
            raise AuthenticationFailed("the internal token is accepted in the local mode only; "
                                       "authenticate with a Cloudflare service token")
        return SERVICE

    from accounts.services import NoIdentity, principal_from_claims
    from accounts.verifier import InvalidToken, KeysUnavailable, default_verifier

    try:
        claims = default_verifier().verify(token)
    except KeysUnavailable:
        raise  # the interceptor answers UNAVAILABLE: an outage, not a bad token
    except InvalidToken as exc:
        log.info("refused a gRPC token: %s", exc.reason)
        raise AuthenticationFailed(
            f"the token is not the internal token and not a valid access token: {exc.reason}"
        ) from None
    try:
        principal = principal_from_claims(claims)
    except NoIdentity as exc:
        log.info("refused a gRPC token: %s", exc.reason)
        raise AuthenticationFailed(exc.reason) from None
    if isinstance(principal, ServiceIdentity):
        return Principal(kind="service", service=principal)
    return Principal(kind="user", user=principal)


# The internal RPCs whose callers are Falcon's controllers (the resource
# manager, the exp controller, the analyzer): they move entities through their state machines or
# edit an experiment's rows directly. Users act through CreateExp, AbortExp and DeleteExp instead.
CONTROLLER_ONLY_METHODS = frozenset({
    "/falcon.v1.ExperimentService/UpdateExpStatus",
    "/falcon.v1.ExperimentService/UpdateExpStatuses",
    "/falcon.v1.JobService/CreateJob",
    "/falcon.v1.JobService/UpdateJobStatus",
    "/falcon.v1.JobService/UpdateJobStatuses",
    "/falcon.v1.JobService/DeleteJob",
    "/falcon.v1.ArtifactService/CreateArtifact",
    "/falcon.v1.ArtifactService/UpdateArtifactStatus",
    "/falcon.v1.ArtifactService/DeleteArtifact",
    # The analyzer controller's (docs/analyzer.md); users read records with Get/List and
    # create, cancel and delete analyses over HTTP.
    "/falcon.v1.AnalysisRecordService/CreateAnalysisRecord",
    "/falcon.v1.AnalysisRecordService/UpdateAnalysisRecord",
    "/falcon.v1.AnalysisRecordService/DeleteAnalysisRecord",
    "/falcon.v1.AnalysisRecordService/ListExpsAwaitingAnalysis",
    "/falcon.v1.AnalysisRecordService/ListRunningAnalyses",
})

# The reads every allowed service token may call, whatever its role.
READ_METHODS = frozenset({
    "/falcon.v1.ExperimentService/GetExp",
    "/falcon.v1.ExperimentService/ListExps",
    "/falcon.v1.ExperimentService/ListExpStates",
    "/falcon.v1.JobService/GetJob",
    "/falcon.v1.JobService/ListJobs",
    "/falcon.v1.JobService/ListJobStates",
    "/falcon.v1.ArtifactService/GetArtifact",
    "/falcon.v1.ArtifactService/ListArtifacts",
    "/falcon.v1.AnalysisRecordService/GetAnalysisRecord",
    "/falcon.v1.AnalysisRecordService/ListAnalysisRecords",
    "/falcon.v1.HistoryService/ListExpEvents",
    "/falcon.v1.ScheduleService/GetSchedule",
})

# Service roles (decisions.md#auth-8): what each machine identity may call besides
# READ_METHODS, exactly the RPCs its code calls (controllers/grpc_client.py: the exp controller
# updates experiments, jobs and artifacts; the resource manager updates jobs; the analyzer keeps
# its analysis records). `maintenance` holds the controller-only RPCs no controller calls
# (repair scripts); `read-only` is every allowed service token no operator gave a role. A
# service token's role comes from FALCON_SERVICE_ROLES or its ServicePrincipal row.
READ_ONLY = "read-only"
ROLE_METHODS: dict[str, frozenset[str]] = {
    "exp-controller": frozenset({
        "/falcon.v1.ExperimentService/UpdateExpStatus",
        "/falcon.v1.ExperimentService/UpdateExpStatuses",
        "/falcon.v1.JobService/UpdateJobStatus",
        "/falcon.v1.ArtifactService/UpdateArtifactStatus",
    }),
    "resource-manager": frozenset({
        "/falcon.v1.JobService/UpdateJobStatus",
        "/falcon.v1.JobService/UpdateJobStatuses",
    }),
    "analyzer": frozenset({
        "/falcon.v1.AnalysisRecordService/ListExpsAwaitingAnalysis",
        "/falcon.v1.AnalysisRecordService/CreateAnalysisRecord",
        "/falcon.v1.AnalysisRecordService/GetAnalysisRecord",
        "/falcon.v1.AnalysisRecordService/ListAnalysisRecords",
        "/falcon.v1.AnalysisRecordService/UpdateAnalysisRecord",
        "/falcon.v1.AnalysisRecordService/DeleteAnalysisRecord",
        "/falcon.v1.AnalysisRecordService/ListRunningAnalyses",
    }),
    "maintenance": frozenset({
        "/falcon.v1.JobService/CreateJob",
        "/falcon.v1.JobService/DeleteJob",
        "/falcon.v1.ArtifactService/CreateArtifact",
        "/falcon.v1.ArtifactService/DeleteArtifact",
    }),
    READ_ONLY: frozenset(),
}


def service_may_call(service: ServiceIdentity, method: str) -> bool:
    """Whether `service` may call `method` (a full gRPC method name).

    The local mode's internal token may call everything (runlocal runs every controller, and it
    acts for a named user in CreateExp); any other service the reads plus its roles' RPCs.
    """
    if service.internal:
        return True
    return method in READ_METHODS or any(method in ROLE_METHODS.get(role, ())
                                         for role in service.roles)


def authorize(principal: Principal, method: str) -> None:
    """Check that `principal` may call `method` (a full gRPC method name).

    A user may call the read RPCs and CreateExp/AbortExp/DeleteExp (whose services apply the
    creator-or-staff rule), never a controller-only RPC. A service may call what
    `service_may_call` allows: default deny, so an allowed service token without a role only
    reads.

    Raises:
        core.errors.PermissionDenied: the principal may not call `method` (PERMISSION_DENIED).
    """
    name = method.rsplit("/", 1)[-1]
    if principal.kind == "service" and principal.service is not None:
        if not service_may_call(principal.service, method):
            roles = ", ".join(sorted(principal.service.roles)) or READ_ONLY
            raise PermissionDenied(
                f"{name} is not allowed for {principal.service.label} (role {roles}); an "
                "operator gives a service token a role in FALCON_SERVICE_ROLES or in the admin "
                "(Service principals).")
        return
    if method in CONTROLLER_ONLY_METHODS:
        hint = ("users create, cancel and delete analyses over HTTP (/api/v1/analyses)."
                if "AnalysisRecordService" in method else
                "users abort or delete experiments with AbortExp and DeleteExp.")
        raise PermissionDenied(f"{name} is called by Falcon's controllers only; {hint}")


def current_principal() -> Principal:
    """Return the principal of the call being served.

    Raises:
        RuntimeError: called outside a call authenticated by the interceptor.
    """
    principal = _current.get()
    if principal is None:
        raise RuntimeError("no authenticated gRPC principal in this context")
    return principal


def set_principal(principal: Principal | None) -> contextvars.Token:
    """Make `principal` the current one; pass the returned token to `reset_principal`."""
    return _current.set(principal)


def reset_principal(token: contextvars.Token) -> None:
    """Restore the principal that was current before `set_principal`."""
    _current.reset(token)


def creator_for(principal: Principal, creator_email: str):
    """Return the user a CreateExp call creates the experiment for.

    A user JWT caller is the creator (the token's email is Experiment.Creator); it
    may repeat its own email in `creator_email` but not name another user. The internal service
    (local mode) acts for a user and must name one who exists, i.e. has logged in once. A
    Cloudflare service principal is returned as it is: `experiments.services.exp_create` refuses
    it (an experiment needs a person as creator), so the rule lives in one place for HTTP and
    gRPC.

    Raises:
        PermissionDenied: a user names another user as creator.
        ValidationFailed: the internal service gives no `creator_email`, or no active user has
            it.
    """
    creator_email = (creator_email or "").strip()
    if principal.user is not None:
        from accounts.emails import email_key, lookalike_problem, shown_email

        if creator_email and (lookalike_problem(creator_email)
                              or email_key(creator_email) != principal.user.email):
            raise PermissionDenied(f"{principal.user.email} cannot create experiments for "
                                   f"{shown_email(creator_email)}; leave creator_email empty.")
        return principal.user
    if principal.service is None or not principal.service.internal:
        return principal.actor
    if not creator_email:
        raise ValidationFailed({"creator_email": [
            "is required with the internal service token: the email of the user the "
            "experiment is created for."]})
    from accounts.selectors import user_get_by_email

    try:
        return user_get_by_email(email=creator_email)
    except NotFound as exc:
        raise ValidationFailed({"creator_email": [exc.message]}) from None
