"""The help cache: a help page printed once is printed again, byte for byte, without importing
click, rich-click or rich, and only while every input of the page is the same
(docs/decisions.md#dec-help-cache). Each test runs the installed `falcon` console script."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli import helpcache
from cli.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parents[2]
FALCON = Path(sys.executable).with_name("falcon")
# Prints the modules the run imported on stderr, after the command, whatever its exit.
PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: sys.stderr.write('MODULES ' + ','.join(sorted(sys.modules))"
         " + '\\n'))\n"
         "sys.argv = ['falcon'] + sys.argv[1:]\n"
         "from cli.start import main\nmain()\n")
DRAWING = ("click", "rich_click", "rich")


@pytest.fixture
def environ(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FALCON_") and k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    # PYTHONPATH: the installed script imports this checkout's `cli` (a worktree's too).
    return {**env, "FALCON_CONFIG_DIR": str(tmp_path / "config"), "COLUMNS": "100",
            "PYTHONPATH": str(ROOT)}


def falcon(environ, *args, probe: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", PROBE, *args] if probe else [str(FALCON), *args]
    return subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=60)


def modules(done: subprocess.CompletedProcess) -> set[str]:
    line = [row for row in done.stderr.splitlines() if row.startswith("MODULES ")][-1]
    return {name.split(".")[0] for name in line[len("MODULES "):].split(",")}


def pages(environ) -> list[Path]:
    folder = Path(environ["FALCON_CONFIG_DIR"], "cache", "help")
    return sorted(p for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.parametrize("args", [["--help"], ["exp", "--help"], ["exp", "list", "-h"],
                                  ["analysis", "create", "--help"], ["config", "--help"],
                                  ["completion", "--help"]])
def test_a_help_page_is_printed_again_from_the_cache_without_drawing_it(environ, args):
    drawn = falcon({**environ, "FALCON_NO_HELP_CACHE": "1"}, *args)
    first = falcon(environ, *args, probe=True)
    second = falcon(environ, *args, probe=True)
    assert drawn.returncode == first.returncode == second.returncode == 0, second.stderr
    assert first.stdout == second.stdout == drawn.stdout
    assert "Usage: falcon" in second.stdout
    assert set(DRAWING) <= modules(first)
    assert modules(second).isdisjoint(DRAWING), sorted(modules(second) & set(DRAWING))
    (page,) = pages(environ)
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    for folder in (page.parent, page.parent.parent, page.parent.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_another_width_encoding_or_environment_draws_its_own_page(environ):
    wide = falcon(environ, "exp", "--help")
    narrow = falcon({**environ, "COLUMNS": "60"}, "exp", "--help")
    latin = falcon({**environ, "PYTHONIOENCODING": "iso8859-15"}, "exp", "--help")
    server = falcon({**environ, "FALCON_SERVER": "http://other:1"}, "exp", "--help")
    assert len(pages(environ)) == 4
    widest = max(map(len, wide.stdout.splitlines()))
    assert max(map(len, narrow.stdout.splitlines())) <= 60 < widest
    for env, done in (({**environ, "COLUMNS": "60"}, narrow),
                      ({**environ, "PYTHONIOENCODING": "iso8859-15"}, latin),
                      ({**environ, "FALCON_SERVER": "http://other:1"}, server)):
        again = falcon(env, "exp", "--help")
        assert again.stdout == done.stdout == falcon({**env, "FALCON_NO_HELP_CACHE": "1"},
                                                     "exp", "--help").stdout


def test_help_given_as_an_option_value_is_never_recorded(environ):
    # `--since --help`: click reads `--help` as the value of --since, and the command refuses it
    for _ in range(2):
        done = falcon(environ, "exp", "logs", "1", "--since", "--help")
        assert done.returncode == ExitCode.USAGE, done.stdout
        assert "--since" in done.stderr
    assert pages(environ) == []


def test_a_cached_page_into_a_closed_pipe_exits_141_without_a_word(environ):
    falcon(environ, "--help")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([str(FALCON), "--help"], cwd=ROOT, env=environ, stdout=write_end,
                              stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == ExitCode.OUTPUT_CLOSED == 141
    assert done.stderr == b""


def test_the_key_changes_with_the_cli_code_and_the_installed_libraries(tmp_path, monkeypatch):
    code = tmp_path / "cli"
    (code / "exp").mkdir(parents=True)
    module = code / "exp" / "create.py"
    module.write_text("HELP = 'one'\n")
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(helpcache, "_CLI_DIR", str(code))
    monkeypatch.setattr(sys, "path", [str(site)])
    environ = {"COLUMNS": "80"}
    first = helpcache.cache_key(["--help"], environ)
    assert helpcache.cache_key(["--help"], environ) == first
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 1_000_000))
    edited = helpcache.cache_key(["--help"], environ)
    assert edited != first
    (site / "rich-99.0.dist-info").mkdir()  # pip installs or upgrades a library
    installed = helpcache.cache_key(["--help"], environ)
    assert installed != edited
    assert helpcache.cache_key(["--help"], {"COLUMNS": "81"}) != installed
    assert helpcache.cache_key(["--help"], {**environ, "PWD": "/elsewhere"}) == installed
    assert helpcache.cache_key(["exp", "--help"], environ) != installed


def test_the_cache_keeps_the_newest_pages(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FALCON_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("FALCON_NO_HELP_CACHE", raising=False)
    monkeypatch.setattr(helpcache, "MAX_ENTRIES", 3)
    for n in range(5):
        argv = ["--help", str(n)]
        assert not helpcache.serve(argv)
        helpcache.record(f"page {n}\n")
        written = tmp_path / "cache" / "help" / helpcache.cache_key(argv, os.environ)
        os.utime(written, (n, n))  # an order of writing that ties cannot blur
    folder = tmp_path / "cache" / "help"
    kept = sorted(helpcache.unseal(p.read_bytes()) for p in folder.iterdir())
    assert len(kept) == 3 and "page 4\n" in kept
    assert helpcache.serve(["--help", "4"])
    assert capsys.readouterr().out == "page 4\n"


def test_a_closed_stdout_never_fails_help(environ):
    # `falcon --help >&-`: Python's sys.stdout is None; the page is drawn (and lost) both times
    for _ in range(2):
        done = subprocess.run(f"exec {FALCON} --help >&-", shell=True, cwd=ROOT, env=environ,
                              capture_output=False, stderr=subprocess.PIPE, timeout=60)
        assert done.returncode == 0 and done.stderr == b""


def test_inputs_that_run_together_never_share_a_key():
    newline_in_argument = helpcache.cache_key(["exp", "get", "--help", "12\nCOLUMNS=50"], {})
    newline_in_environment = helpcache.cache_key(["exp", "get", "--help", "12"],
                                                 {"COLUMNS": "50"})
    assert newline_in_argument != newline_in_environment
    assert helpcache.cache_key(["--help"], {"COLORTERM": "x\nCOLUMNS=50"}) != \
        helpcache.cache_key(["--help"], {"COLORTERM": "x", "COLUMNS": "50"})


@pytest.mark.parametrize("damage", [b"", b"\xff\xfe binary", "cut".encode()])
def test_a_damaged_page_is_drawn_and_written_again(environ, damage):
    drawn = falcon(environ, "exp", "--help")
    (page,) = pages(environ)
    whole = page.read_bytes()
    page.write_bytes(damage if damage != b"cut" else whole[:len(whole) // 2])
    again = falcon(environ, "exp", "--help")
    assert again.returncode == 0 and again.stdout == drawn.stdout
    assert page.read_bytes() == whole  # drawn and stored again


def test_a_cache_folder_that_is_a_link_or_open_to_others_is_never_used(environ, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    cache = Path(environ["FALCON_CONFIG_DIR"], "cache")
    cache.mkdir(parents=True, mode=0o700)
    (cache / "help").symlink_to(shared)
    for _ in range(2):
        done = falcon(environ, "--help", probe=True)
        assert done.returncode == 0 and "rich_click" in modules(done)
    assert list(shared.iterdir()) == []
    (cache / "help").unlink()
    (cache / "help").mkdir(mode=0o700)
    (cache / "help").chmod(0o777)
    falcon(environ, "--help")
    assert list((cache / "help").iterdir()) == []
