"""`falcon --help` stays fast: the entry module imports no heavy library (checked in a fresh
interpreter; the startup time itself is measured by bench/cli_startup.py, not asserted)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cli.token_cache import CredentialStore, Session

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("httpx", "rich", "yaml", "jwt", "django", "rest_framework", "cryptography")


def _modules_after(code: str) -> set[str]:
    probe = (f"import sys, json\n{code}\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_entry_point_imports_no_heavy_library():
    loaded = _modules_after("import cli.main")
    assert "cli" in loaded and "rich_click" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_help_lists_the_command_groups_without_django():
    done = subprocess.run([sys.executable, "-m", "cli", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "auth" in done.stdout and "exp" in done.stdout
    loaded = _modules_after("from cli.main import main\n"
                            "try:\n    main(['exp', '--help'])\nexcept SystemExit:\n    pass")
    assert "django" not in loaded and "httpx" not in loaded


# What the two commands people run most load (bench/cli_startup.py measures their CPU): help is
# drawn by rich-click (so rich), but without reading package metadata; a table into a pipe needs
# neither rich's console nor yaml, and the HTTP client is urllib3, not httpx (which imports its
# own command line: rich, pygments). urllib3 itself imports importlib.metadata (its HTTP/2
# probe), so only help is held to that. docs/decisions.md#dec-cli-startup.
NOT_FOR_HELP = ("httpx", "httpcore", "urllib3", "yaml", "jwt", "cryptography", "django",
                "importlib.metadata", "cli.exp", "cli.client", "cli.output")
NOT_FOR_A_PIPED_LIST = ("httpx", "httpcore", "yaml", "jwt", "cryptography", "django",
                        "tenacity", "rich.console", "rich.text",
                        "rich.table", "pygments")


def _loaded_by(args: list[str], environ: dict[str, str]) -> tuple[int, str, set[str]]:
    """Run `falcon ARGS` in a fresh interpreter, stdout a pipe; return its exit code, its stdout
    and every module it had imported by the end."""
    probe = ("import sys\nfrom cli.main import main\ncode = 0\n"
             f"try:\n    main({args!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
             "sys.stdout.flush()\n"
             "sys.stderr.write('MODULES ' + ','.join(sorted(sys.modules)) + '\\n')\n"
             "sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**environ, "PYTHONPATH": str(ROOT)})
    line = [row for row in done.stderr.splitlines() if row.startswith("MODULES ")][-1]
    return done.returncode, done.stdout, set(line[len("MODULES "):].split(","))


def _under(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))


def test_help_is_drawn_by_rich_click_without_metadata_http_or_commands():
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FALCON_")}
    code, out, loaded = _loaded_by(["--help"], environ)
    assert code == 0 and "Usage: falcon" in out and "exp" in out
    assert "rich_click" in loaded and "rich.console" in loaded
    assert _under(loaded, NOT_FOR_HELP) == []


class _EmptyPage(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        body = json.dumps({"next": None, "previous": None, "results": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_piped_exp_list_imports_neither_rich_console_nor_httpx_nor_yaml(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmptyPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        payload = base64.urlsafe_b64encode(b'{"exp": 4102444800}').rstrip(b"=").decode()
        CredentialStore(tmp_path).put(Session(
            server=url, token=f"eyJhbGciOiJIUzI1NiJ9.{payload}.c2ln", email="a@example.com",
            expires_at=4102444800, method="local", obtained_at=0))
        environ = {**{k: v for k, v in os.environ.items() if not k.startswith("FALCON_")},
                   "FALCON_CONFIG_DIR": str(tmp_path), "FALCON_SERVER": url}
        for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
            environ.pop(name, None)
        code, out, loaded = _loaded_by(["exp", "list"], environ)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0 and out == ""  # "No experiments match." goes to stderr
    assert "urllib3" in loaded and "cli.table" in loaded
    assert _under(loaded, NOT_FOR_A_PIPED_LIST) == []


def test_every_exp_command_is_found_in_the_module_that_defines_it():
    from cli.exp.group import COMMAND_MODULES, exp_group

    import click

    names = exp_group.list_commands(click.Context(exp_group))  # imports every module
    assert sorted(names) == sorted(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        assert exp_group.commands[name].callback.__module__ == f"cli.exp.{module}", name


def test_exp_list_imports_only_its_own_command_module():
    # `--limit 0` is refused by `list` itself, after the group looked the command up.
    done = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom cli.main import main\n"
         "try:\n    main(['exp', 'list', '--limit', '0'])\nexcept SystemExit:\n    pass\n"
         "print(','.join(sorted(m for m in sys.modules if m.startswith('cli.exp.'))))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1].split(",") == [
        "cli.exp.group", "cli.exp.inputs", "cli.exp.read"]
