"""Fixtures of the CLI tests: the real Django app behind pytest-django's `live_server`, the CLI
run in-process through click's `CliRunner` with an injected `Environment`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import io

import httpx
import pytest
import urllib3
from click.testing import CliRunner, Result

from cli.env import Environment
from cli.main import falcon

EMAIL = "alice@example.com"

TASKS_YAML = """\
main:
  command: "python -u -m sgl_jax.launch_server --enable-profiling --num-steps=10"
  replica: 1
  image: "gcr.io/primatrix/sglang_jax:dev"
  device_count: 8
  device_type: tpu-v5p
  device_topo: 2x2x2
  envs:
    JAX_PLATFORMS: tpu
    LOG_LEVEL: info
"""

CONFIG_YAML = """\
model: qwen/qwen3-32b
random_input_len: 16384 
random_output_len: 1024 
random_range_ratio: 1.0
max_concurrency: 64
"""


def as_request(method: str, url: str, sent: dict) -> httpx.Request:
    """A request the client sent through urllib3, as an `httpx.Request`: the tests read its
    parsed URL (`url.path`, `url.params`) and its case-insensitive headers."""
    return httpx.Request(method, url, headers=dict(sent.get("headers") or {}),
                         content=sent.get("body") or b"")


class RecordingTransport(urllib3.PoolManager):
    """A real network pool (`Environment.transport`) that remembers every request it sends."""

    def __init__(self) -> None:
        super().__init__(retries=False)
        self.requests: list[httpx.Request] = []

    def urlopen(self, method, url, redirect=True, **kw):
        self.requests.append(as_request(method, url, kw))
        return super().urlopen(method, url, redirect=redirect, **kw)


class MockTransport(urllib3.PoolManager):
    """A pool that answers every request with `handler(request) -> httpx.Response`, as
    `httpx.MockTransport` does, without a network."""

    def __init__(self, handler) -> None:
        super().__init__()
        self.handler = handler

    def urlopen(self, method, url, redirect=True, **kw):
        answer = self.handler(as_request(method, url, kw))
        return urllib3.HTTPResponse(
            body=io.BytesIO(answer.read()), status=answer.status_code,
            headers=list(answer.headers.multi_items()), request_method=method, request_url=url,
            preload_content=kw.get("preload_content", True))


@dataclass
class Falcon:
    """Runs `falcon ARGS` against a server, with its own config dir, clock and sleep."""

    server: str
    config_dir: Path
    transport: RecordingTransport = field(default_factory=RecordingTransport)
    sleep: object = None
    monotonic: object = None
    clock: object = None
    stdout: object = None  # a stream for results; None: click's captured stdout
    environ: dict = field(default_factory=dict)
    interactive: object = None  # () -> bool: whether a prompt can be answered

    def env(self) -> Environment:
        kwargs = {"config_dir": self.config_dir, "environ": dict(self.environ),
                  "transport": self.transport, "http_timeout": 10.0}
        for name in ("sleep", "monotonic", "clock", "stdout", "interactive"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        return Environment(**kwargs)

    def __call__(self, *args: str, input: str | None = None, server: str | None = None) -> Result:
        return CliRunner().invoke(falcon, list(args), input=input, obj=self.env(),
                                  env={"FALCON_SERVER": server or self.server},
                                  catch_exceptions=True)

    def login(self, email: str = EMAIL) -> Result:
        result = self("auth", "login", "--email", email)
        assert result.exit_code == 0, result.output
        return result


@pytest.fixture
def falcon_cli(live_server, tmp_path) -> Falcon:
    """The CLI pointed at the live server, not logged in yet."""
    return Falcon(server=live_server.url, config_dir=tmp_path / "falcon-config")


@pytest.fixture
def logged_in(falcon_cli) -> Falcon:
    """The CLI logged in as alice@example.com to the live server."""
    falcon_cli.login()
    falcon_cli.transport.requests.clear()
    return falcon_cli


@pytest.fixture
def files(tmp_path):
    """Write a file under tmp_path: `files(name, text_or_bytes) -> str path`."""

    def write(name: str, content: str | bytes) -> str:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))
        return str(path)

    return write


def one_line(text: str) -> str:
    """Assert `text` is exactly one non-empty line and return it."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {lines!r}"
    return lines[0]
