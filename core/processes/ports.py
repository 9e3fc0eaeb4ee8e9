"""Listening addresses of the local processes: parse `host:port`, and say why one cannot be bound.

`rungrpc` binds its port exclusively (no SO_REUSEPORT) and `runlocal` checks both of its ports
before it starts anything: a second instance must fail loudly, naming the address, instead of
sharing a port with the first one (with SO_REUSEPORT the kernel would split the connections
between the two servers, and each would serve half the calls against its own database).
"""
from __future__ import annotations

import errno
import os
import socket

# `runserver 0:8000` is Django's shorthand for 0.0.0.0:8000.
_HOST_ALIASES = {"": "0.0.0.0", "0": "0.0.0.0"}


def split_addr(addr: str) -> tuple[str, int]:
    """Return `(host, port)` of `host:port`, `[v6]:port` or `port`.

    Raises:
        ValueError: the port is not an integer from 0 to 65535.
    """
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{addr!r} is not host:port") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"{addr!r}: the port must be from 0 to 65535")
    return _HOST_ALIASES.get(host, host), number


def bind_problem(addr: str) -> str | None:
    """Return why `addr` cannot be listened on now, or None when a server could bind it.

    Binds (and closes at once) a probe socket with SO_REUSEADDR, as servers do, so a port whose
    last connections are in TIME_WAIT counts as free, while a port another process listens on
    does not (on Linux SO_REUSEADDR never lets two sockets listen on one address).
    """
    try:
        host, port = split_addr(addr)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (ValueError, OSError) as exc:
        return f"{addr} is not an address of this machine ({exc})"
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return f"port {port} of {host} is already in use by another process"
                if exc.errno == errno.EACCES:
                    return f"port {port} needs privileges to be bound (use a port above 1023)"
                if exc.errno == errno.EADDRNOTAVAIL:
                    return f"{host} is not an address of this machine"
                return f"{addr} cannot be bound: {exc.strerror or exc}"
    return None


LOCAL_OPT_IN = "FALCON_LOCAL_ALLOW_NONLOOPBACK"


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP literal, possibly `[v6]`, or `localhost`) is a loopback address.

    Uses `ipaddress` (127.0.0.0/8 and ::1, RFC 1122 3.2.1.3 / RFC 4291 2.5.3); any other name
    counts as not loopback, since it may resolve anywhere.
    """
    import ipaddress

    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_bind_problem(addr: str, *, mode: str, opt_in: bool) -> tuple[str | None, str | None]:
    """Say whether a server may listen on `addr` in auth `mode`: `(refusal, warning)`.

    In the local mode anyone reaching the server gets a token for any email (staff included),
    so it listens on loopback only, unless the operator sets FALCON_LOCAL_ALLOW_NONLOOPBACK=1
    (decisions.md#auth-10); then it starts with a warning. Other modes: `(None, None)`.
    """
    if mode != "local":
        return None, None
    try:
        host, _port = split_addr(addr)
    except ValueError as exc:
        return str(exc), None
    if is_loopback(host):
        return None, None
    if opt_in:
        return None, (f"WARNING: local mode listening on {addr}, beyond this machine: anyone who "
                      f"reaches it can get a token for any email, staff included "
                      f"({LOCAL_OPT_IN} is set).")
    return (f"refusing to listen on {addr} in the local mode: anyone who reaches it could get a "
            f"token for any email, staff included. Listen on 127.0.0.1 or [::1], use "
            f"FALCON_AUTH_MODE=cloudflare, or set {LOCAL_OPT_IN}=1 if this network is "
            f"trusted."), None


def metrics_host(configured: str, port: int, *, mode: str, opt_in: bool) -> tuple[str, str | None]:
    """Return the host a `/metrics` listener binds (`FALCON_METRICS_ADDR`) and a warning.

    Unset: loopback in the local mode, all addresses in the others. The metrics listener is a
    listener of the local mode like the APIs, so the same rule applies (`local_bind_problem`).

    Args:
        configured: the value of FALCON_METRICS_ADDR, a host without a port ("" when unset).
        port: the metrics port (FALCON_METRICS_PORT or --metrics-port).

    Raises:
        ValueError: the local mode refuses the address; the message names FALCON_METRICS_ADDR.
    """
    host = configured.strip() or ("127.0.0.1" if mode == "local" else "0.0.0.0")
    bare = host.strip("[]")
    refusal, warning = local_bind_problem(f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}",
                                          mode=mode, opt_in=opt_in)
    if refusal:
        raise ValueError(f"FALCON_METRICS_ADDR={host}: {refusal}")
    return bare, warning


def configured_metrics_host(port: int) -> tuple[str, str | None]:
    """`metrics_host` for this process: FALCON_METRICS_ADDR and the auth mode's settings.

    One reading for rungrpc and runcontroller. Raises ValueError as `metrics_host` does.
    """
    from django.conf import settings

    return metrics_host(os.environ.get("FALCON_METRICS_ADDR", ""), port,
                        mode=settings.FALCON_AUTH_MODE,
                        opt_in=settings.FALCON_LOCAL_ALLOW_NONLOOPBACK)
