"""Refuse to run users' code as the server's own OS user once more than one person can log in.

The local cluster backend (`controllers.cluster_backends.local`) and the local analysis backend
(`controllers.analyzer.backends.local`) start a user's task or online script as a child process
of the server: same uid, same files. Its environment is scrubbed (`DEFAULT_PASSTHROUGH_ENV`),
but the process can still read `/proc/<pid>/environ` of the server's other processes, `var/`
(the secret key, the internal token, the signing key) and the SQLite database, and write them.
On one person's machine that person is the operator anyway. Once several people can
authenticate (`FALCON_AUTH_MODE=cloudflare`, or the local mode with
`FALCON_LOCAL_ALLOW_NONLOOPBACK=1`), it would hand every user the server, so it is refused
unless the operator sets `FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER=1`.

`user_code_problem` is the one check. Every process that starts user code or accepts work for
it calls `require_isolated_user_code` when it starts, before it listens or runs anything: the
API servers (`runserver`, `rungrpc`, `falcon_site.wsgi` for gunicorn) for the clusters, so that
nobody queues a task that never runs; the resource manager for the clusters; the analyzer
controller for its backend; `runlocal` for both. It is a call at start-up, not only a system
check: gunicorn runs no system checks, `--skip-checks` and SILENCED_SYSTEM_CHECKS skip them, and
Django's autoreloader keeps a failed `runserver` waiting instead of exiting. The API servers do
not check `FALCON_ANALYZER_BACKEND`: analyses run in the analyzer controller, which refuses to
start, and creating one fails while it is down, so nothing queues there. The same function is
also a deploy system check (`manage.py check --deploy`, `falcon.E010`).
"""
from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured

OPT_IN = "FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER"
SAFE_WAY = ("Use Kubernetes clusters in FALCON_CLUSTERS_FILE (backend: kubernetes) and "
            "FALCON_ANALYZER_BACKEND=kubernetes: each task and analysis then runs in its own Pod, "
            "as another user, without the server's files")


def several_people_can_authenticate() -> bool:
    """Whether more than one person can get a token: Cloudflare Access, or the local mode
    listening beyond loopback (`FALCON_LOCAL_ALLOW_NONLOOPBACK`)."""
    return settings.FALCON_AUTH_MODE == "cloudflare" or (
        settings.FALCON_AUTH_MODE == "local" and settings.FALCON_LOCAL_ALLOW_NONLOOPBACK)


def _local_runners(*, tasks: bool, analyses: bool) -> list[str]:
    """Name what would run user code as this server: local clusters, the local analyzer."""
    found = []
    if tasks:
        from core.cluster_settings import cluster_specs

        local = sorted(name for name, spec in cluster_specs().items()
                       if spec.get("backend") == "local")
        if local:
            source = (f"the clusters file {settings.FALCON_CLUSTERS_FILE}"
                      if settings.FALCON_CLUSTERS_FILE
                      else "the default when FALCON_CLUSTERS_FILE is unset")
            found.append(f"local cluster{'s' if len(local) > 1 else ''} "
                         f"{', '.join(local)} ({source})")
    if analyses and settings.FALCON_ANALYZER_BACKEND == "local":
        found.append("FALCON_ANALYZER_BACKEND=local")
    return found


def user_code_problem(*, tasks: bool, analyses: bool) -> tuple[str | None, str | None]:
    """Say whether this process may run (or accept) user code as configured: `(refusal, warning)`.

    Args:
        tasks: the process runs or accepts experiments' tasks (the configured clusters count).
        analyses: the process runs analyses (`FALCON_ANALYZER_BACKEND` counts).

    Returns:
        `(None, None)` when nothing runs as the server or one person alone can log in;
        `(None, warning)` when the operator opted in; `(refusal, None)` otherwise.

    Raises:
        ImproperlyConfigured: the clusters file cannot be read.
    """
    if not several_people_can_authenticate():
        return None, None
    runners = _local_runners(tasks=tasks, analyses=analyses)
    if not runners:
        return None, None
    who = ("FALCON_AUTH_MODE=cloudflare" if settings.FALCON_AUTH_MODE == "cloudflare"
           else "FALCON_LOCAL_ALLOW_NONLOOPBACK=1")
    what = " and ".join(runners)
    if settings.FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER:
        return None, (f"WARNING: {OPT_IN}=1: {what} run every user's code as this server's OS "
                      f"user, and more than one person can log in ({who}): any user can read "
                      "the server's secrets and database and act as the server.")
    return (f"refusing to start: {what} would run every user's code as this server's OS user, "
            f"and more than one person can log in ({who}); that code could read this server's "
            f"secrets (its environment, var/) and its database, and act as the server. "
            f"{SAFE_WAY}. Only if every user may act as the server, set {OPT_IN}=1."), None


def require_isolated_user_code(*, tasks: bool, analyses: bool,
                               warn: Callable[[str], None] | None = None) -> None:
    """Stop the process when `user_code_problem` refuses; pass its warning to `warn`.

    Raises:
        ImproperlyConfigured: the refusal (callers in commands turn it into a CommandError, so
            the process exits non-zero with the message).
    """
    refusal, warning = user_code_problem(tasks=tasks, analyses=analyses)
    if refusal:
        raise ImproperlyConfigured(refusal)
    if warning and warn is not None:
        warn(warning)


def check_user_code(app_configs=None, **kwargs) -> list[Error]:
    """Deploy system check `falcon.E010`: the refusal of a process running tasks and analyses."""
    try:
        refusal, _ = user_code_problem(tasks=True, analyses=True)
    except ImproperlyConfigured as exc:
        refusal = str(exc)
    return [Error(refusal, hint=f"{SAFE_WAY}.", id="falcon.E010")] if refusal else []
