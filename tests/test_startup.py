"""The settings only read; `manage.py prepare` creates the local state; the checks name what is
missing (`falcon_site.settings`, `falcon_site.startup`)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from falcon_site.startup import check_local_state, create_file_once, prepare_local_state

ROOT = Path(__file__).resolve().parent.parent
STATE_FILES = ("django-secret-key", "internal-token", "jwt-signing-key.pem")


def clean_env(var_dir: Path, **extra: str) -> dict[str, str]:
    """The test's environment without anything that would provide the local state."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "DJANGO_SECRET_KEY", "FALCON_INTERNAL_TOKEN"}
           and not k.startswith(("FALCON_AUTH_", "FALCON_CF_"))}
    return {**env, "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
            "FALCON_VAR_DIR": str(var_dir), **extra}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run(env, str(ROOT / "manage.py"), *args)


SHOW = ("import django; django.setup(); from django.conf import settings; "
        "from django.urls import get_resolver; get_resolver().url_patterns; "
        "print(settings.FALCON_SECRET_KEY_FILE, settings._wrapped.SECRET_KEY == '', "
        "repr(settings.FALCON_INTERNAL_TOKEN))")


@pytest.mark.parametrize("exists", [True, False], ids=["empty-folder", "no-folder"])
def test_importing_the_settings_creates_nothing(tmp_path, exists):
    var = tmp_path / "var"
    if exists:
        var.mkdir()
    result = run(clean_env(var), "-c", SHOW)
    assert result.returncode == 0, result.stderr
    # The secrets are empty until `manage.py prepare` creates their files.
    assert result.stdout.split() == [str(var / "django-secret-key"), "True", "''"]
    assert (sorted(var.iterdir()) if exists else var.exists()) == ([] if exists else False)


def test_check_names_the_missing_state_and_prepare_creates_it_once(tmp_path):
    var = tmp_path / "var"
    env = clean_env(var)
    missing = manage(env, "check")
    assert missing.returncode != 0
    for check_id, name in (("falcon.E001", "django-secret-key"), ("falcon.E002", "internal-token"),
                           ("falcon.E003", "jwt-signing-key.pem")):
        assert f"{check_id}) The file {var / name} does not exist" in missing.stderr, \
            missing.stderr
    assert "Create it with `python manage.py prepare`" in missing.stderr
    assert not var.exists()

    prepared = manage(env, "prepare")
    assert prepared.returncode == 0, prepared.stderr
    assert prepared.stdout.splitlines() == [f"created {var}"] + [
        f"created {var / name}" for name in STATE_FILES]
    contents = {}
    for name in STATE_FILES:
        assert stat.S_IMODE((var / name).stat().st_mode) == 0o600
        contents[name] = (var / name).read_bytes()
    assert len(contents["django-secret-key"].strip()) >= 50
    assert contents["jwt-signing-key.pem"].startswith(b"-----BEGIN PRIVATE KEY-----")

    assert manage(env, "check", "--database", "default").returncode == 0  # the folder too
    again = manage(env, "prepare")
    assert again.returncode == 0 and again.stdout == ""
    assert {name: (var / name).read_bytes() for name in STATE_FILES} == contents

    # Every process reads the same secrets (runlocal's children agree with each other).
    shown = {run(env, "-c", "import django; django.setup(); from django.conf import settings; "
                        "print(settings.SECRET_KEY, settings.FALCON_INTERNAL_TOKEN)").stdout
             for _ in range(2)}
    assert shown == {f"{contents['django-secret-key'].decode().strip()} "
                     f"{contents['internal-token'].decode().strip()}\n"}


def test_migrate_alone_sets_up_a_fresh_var_dir(tmp_path):
    """`manage.py migrate` prepares first: a fresh checkout, or docker-compose's migrate
    service, needs nothing else."""
    var = tmp_path / "var"
    result = manage(clean_env(var), "migrate", "--noinput", "-v0")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in var.iterdir()) == sorted([*STATE_FILES, "falcon.sqlite3"])


@pytest.mark.parametrize("exists", [True, False], ids=["open-folder", "no-folder"])
def test_prepare_leaves_the_local_state_to_its_owner_alone(tmp_path, exists):
    """The local state holds the database and every run's files: another account of the
    machine may not read it, whatever the umask made of the folder."""
    var = tmp_path / "var"
    if exists:
        var.mkdir(mode=0o755)
        var.chmod(0o755)
    result = manage(clean_env(var), "migrate", "--noinput", "-v0")
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(var.stat().st_mode) == 0o700


def test_a_deployed_process_needs_no_local_state(tmp_path):
    """Cloudflare mode with its secrets in the environment, as the manifests run it: the checks
    pass with no FALCON_VAR_DIR at all, and nothing is created."""
    var = tmp_path / "var"
    env = clean_env(var, FALCON_AUTH_MODE="cloudflare",
                    FALCON_CF_TEAM_DOMAIN="https://acme.cloudflareaccess.com",
                    FALCON_CF_AUDIENCES="aud-tag", DJANGO_SECRET_KEY="k" * 50)
    result = manage(env, "check")
    assert result.returncode == 0, result.stderr
    assert not var.exists()


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_the_check_reports_each_missing_file_and_prepare_creates_them(settings, tmp_path):
    settings.FALCON_SECRET_KEY_FILE = tmp_path / "secret"
    settings.FALCON_INTERNAL_TOKEN_FILE = tmp_path / "token"
    settings.FALCON_LOCAL_SIGNING_KEY = tmp_path / "key.pem"
    settings.VAR_DIR = tmp_path / "var"
    settings.DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                                      "NAME": str(tmp_path / "db" / "falcon.sqlite3")}}
    errors = check_local_state()
    assert [e.id for e in errors] == ["falcon.E001", "falcon.E002", "falcon.E003"]
    assert errors[0].msg == (f"The file {tmp_path / 'secret'} does not exist: SECRET_KEY is "
                             "read from it (DJANGO_SECRET_KEY is unset).")
    assert errors[0].hint == ("Create it with `python manage.py prepare`, or set "
                              "DJANGO_SECRET_KEY.")
    assert errors[2].hint == "Create it with `python manage.py prepare`."

    created = prepare_local_state()
    assert created == [tmp_path / "var", tmp_path / "db", tmp_path / "secret",
                       tmp_path / "token", tmp_path / "key.pem"]
    assert check_local_state() == []
    # This process's settings now hold what the files hold.
    assert settings.SECRET_KEY == (tmp_path / "secret").read_text().strip()
    assert settings.FALCON_INTERNAL_TOKEN == (tmp_path / "token").read_text().strip()
    assert prepare_local_state() == []


def test_the_checks_need_no_file_when_the_environment_provides_everything(settings):
    settings.FALCON_SECRET_KEY_FILE = None
    settings.FALCON_INTERNAL_TOKEN_FILE = None
    settings.FALCON_AUTH_MODE = "cloudflare"
    assert check_local_state() == []


def test_a_file_is_created_once_and_never_replaced(tmp_path):
    path = tmp_path / "sub" / "secret"
    assert create_file_once(path, lambda: b"first")
    assert not create_file_once(path, lambda: b"second")
    assert path.read_bytes() == b"first" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret"]  # no temporary file left
