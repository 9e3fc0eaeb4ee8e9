"""CPU per request of a list page, a create and `/healthz` in process, and their profiles.

Run from the repository root, on a database `bench/api.py --reuse DIR` seeded:

    .venv/bin/python bench/api_profile.py --db DIR [--requests 500] [--profile list|create|healthz]

Each request goes through the WSGI application gunicorn serves (`falcon_site.wsgi`: the
chunked-body wrapper, every middleware, DRF), called in this process with a WSGI environ
as gunicorn builds one, with the local mode's token of a seeded user; no socket, no server.
It prints the CPU per request (this process's user + system time; `--requests` requests after
50 of warm-up, in `--blocks` blocks that alternate between the operations: the lowest block's
and the median) of `list p1` (`GET /api/v1/exps`), `create` (`POST /api/v1/exps`) and
`healthz`, and each one's ratio to `healthz`; with `--profile OP` it runs OP under cProfile
and prints its top functions by cumulative and by own time. The creates are deleted at the end.

A measurement, not a test: no test asserts what it prints.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "\n".join(f"param_{i}: {i * 37 % 1000}" for i in range(80))  # bench/api.py's


def environ(method: str, path: str, query: str, headers: dict[str, str],
            body: bytes = b"") -> dict:
    """A WSGI environ for one request, as gunicorn gives it."""
    env = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
           "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
           "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "50000", "SCRIPT_NAME": "",
           "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr,
           "wsgi.version": (1, 0), "wsgi.multithread": False, "wsgi.multiprocess": True,
           "wsgi.run_once": False, "wsgi.input_terminated": True, "HTTP_HOST": "127.0.0.1:8000"}
    for name, value in headers.items():
        env["HTTP_" + name.upper().replace("-", "_")] = value
    if body:
        env["CONTENT_TYPE"] = "application/json"
        env["CONTENT_LENGTH"] = str(len(body))
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the folder `bench/api.py --reuse` seeded")
    parser.add_argument("--mariadb", default=None,
                        help="a MariaDB database URL to use instead (seeded by `api.py --hold`)")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--blocks", type=int, default=10,
                        help="blocks the requests of each operation are split into")
    parser.add_argument("--profile", choices=["list", "create", "healthz"], default=None)
    parser.add_argument("--query", default="",
                        help="the list's query string, e.g. status=Failed (default: none)")
    parser.add_argument("--page", type=int, default=1,
                        help="profile this page of the list (its cursor read by following the "
                             "`next` links from page 1; default 1)")
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--save", default=None, help="write the profile to this file too")
    args = parser.parse_args()
    folder = Path(args.db).resolve()
    os.environ.update({"FALCON_VAR_DIR": str(folder), "FALCON_AUTH_MODE": "local",
                       "DATABASE_URL": args.mariadb or f"sqlite:///{folder}/falcon.sqlite3",
                       "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
                       "FALCON_LOG_LEVEL": "WARNING"})
    sys.path.insert(0, str(ROOT))
    from falcon_site.wsgi import application

    from accounts.issuer import local_issuer
    from experiments.models import Experiment

    token = local_issuer().issue("alice@example.com", ttl_seconds=3600).token
    headers = {"Authorization": f"Bearer {token}"}
    first_new = (Experiment.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
    counter = iter(range(10**9))

    def call(method: str, path: str, query: str = "", body: bytes = b"",
             replies: list | None = None) -> int:
        status: list[str] = []
        result = application(environ(method, path, query, headers, body),
                             lambda s, h, exc_info=None: status.append(s))
        content = b"".join(result)
        if hasattr(result, "close"):
            result.close()
        if replies is not None:
            replies.append(content)
        return int(status[0][:3])

    query = args.query
    for page in range(1, args.page):
        replies: list[bytes] = []
        call("GET", "/api/v1/exps", query, replies=replies)
        link = json.loads(replies[0])["next"]
        if link is None:
            raise SystemExit(f"the list has {page} pages, fewer than --page {args.page}")
        query = urlsplit(link).query

    def create_body() -> bytes:
        return json.dumps({"name": f"profile-{os.getpid()}-{next(counter)}",
                           "cluster_name": "local", "exp_type": "benchmark", "config": CONFIG,
                           "role_to_task_spec": {"main": {"command": "true", "replica": 1}}}
                          ).encode()

    ops = {
        "list": lambda: call("GET", "/api/v1/exps", query),
        "create": lambda: call("POST", "/api/v1/exps", body=create_body()),
        "healthz": lambda: call("GET", "/healthz"),
    }
    expected = {"list": 200, "create": 201, "healthz": 200}
    try:
        for name, op in ops.items():
            for _ in range(50):
                status = op()
                if status != expected[name]:
                    raise SystemExit(f"{name} answered {status}")
        # The operations take turns in blocks, so a change of the machine's load falls on all
        # of them; a block's CPU per request is kept, and the lowest and the median printed
        # (the lowest moves least with other processes' load).
        blocks: dict[str, list[float]] = {name: [] for name in ops}
        size = max(1, args.requests // args.blocks)
        for _ in range(args.blocks):
            for name, op in ops.items():
                t0 = time.process_time()
                for _ in range(size):
                    op()
                blocks[name].append((time.process_time() - t0) * 1000 / size)
        low = {name: min(values) for name, values in blocks.items()}
        mid = {name: statistics.median(values) for name, values in blocks.items()}
        print(f"# {args.blocks} blocks of {size} requests each in process, load average "
              f"{os.getloadavg()[0]:.1f}; CPU ms per request, lowest block and median")
        for name in ops:
            print(f"{name:<8} {low[name]:6.3f} ({low[name] / low['healthz']:4.1f} x healthz)  "
                  f"median {mid[name]:6.3f} ({mid[name] / mid['healthz']:4.1f} x)")
        if args.profile:
            op = ops[args.profile]
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.requests):
                op()
            profiler.disable()
            if args.save:
                profiler.dump_stats(args.save)
            for order in ("cumulative", "tottime"):
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(args.top)
                print(out.getvalue())
    finally:
        Experiment.objects.filter(pk__gte=first_new).delete()


if __name__ == "__main__":
    main()
