"""The explicit start-up step: create the local state the settings read, and check it is there.

Importing the settings never writes anything. What they read from disk is created here, by
`prepare_local_state()`, as the configuration needs it:

- the folder `FALCON_VAR_DIR`, and the SQLite database's folder (SQLite creates the file, not
  its folder);
- `FALCON_SECRET_KEY_FILE`: Django's SECRET_KEY, when `DJANGO_SECRET_KEY` is unset;
- `FALCON_INTERNAL_TOKEN_FILE`: the controllers' token, in the local mode when
  `FALCON_INTERNAL_TOKEN` is unset;
- `FALCON_LOCAL_SIGNING_KEY`: the local issuer's RSA key, in the local mode.

It runs from `python manage.py prepare`, from `manage.py migrate` before migrating (so that
`migrate` alone still sets up a fresh checkout or a docker-compose volume), from
`manage.py runlocal` before it starts its processes, and from the test suite's conftest.py.
Files are written whole to a temporary file (mode 0600), then hard-linked into place, and never
replaced: processes preparing at the same time end up with the same secret, and every process
started afterwards (runlocal's children) reads that one.

`check_local_state` is a system check (registered by `falcon_site.apps`): each missing file is
an Error (`falcon.E001` secret key, `falcon.E002` internal token, `falcon.E003` signing key)
that names it and the command that creates it. A missing SQLite folder has no check of its own:
Django's model checks open the database first, and `migrate` creates the folder anyway.
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.checks import Error

PREPARE = "python manage.py prepare"


@dataclass(frozen=True)
class StateFile:
    """One file of the local state.

    Attributes:
        path: where it lives.
        why: what reads it, for the check's message.
        alternative: how to do without it (an environment variable), or "".
        check_id: the system check's id when it is missing.
        make: returns the content of a new file.
    """

    path: Path
    why: str
    alternative: str
    check_id: str
    make: Callable[[], bytes]


def _new_secret() -> bytes:
    return secrets.token_urlsafe(48).encode()


def _new_signing_key() -> bytes:
    from accounts.issuer import new_signing_key_pem

    return new_signing_key_pem()


def _database_folders() -> list[Path]:
    """The folders of the SQLite databases (SQLite creates a database file, not its folder)."""
    folders = []
    for db in settings.DATABASES.values():
        name = str(db.get("NAME") or "")
        if str(db.get("ENGINE", "")).endswith(".sqlite3") and name not in ("", ":memory:") \
                and not name.startswith("file:"):
            folders.append(Path(name).parent)
    return folders


def _files() -> list[StateFile]:
    items = []
    if settings.FALCON_SECRET_KEY_FILE:
        items.append(StateFile(Path(settings.FALCON_SECRET_KEY_FILE),
                               "SECRET_KEY is read from it (DJANGO_SECRET_KEY is unset)",
                               "or set DJANGO_SECRET_KEY", "falcon.E001", _new_secret))
    if settings.FALCON_INTERNAL_TOKEN_FILE:
        items.append(StateFile(Path(settings.FALCON_INTERNAL_TOKEN_FILE),
                               "the local mode reads the controllers' internal token from it "
                               "(FALCON_INTERNAL_TOKEN is unset)",
                               "or set FALCON_INTERNAL_TOKEN (32 characters or more)",
                               "falcon.E002", _new_secret))
    if settings.FALCON_AUTH_MODE == "local":
        items.append(StateFile(Path(settings.FALCON_LOCAL_SIGNING_KEY),
                               "the local token issuer signs with it (FALCON_LOCAL_SIGNING_KEY)",
                               "", "falcon.E003", _new_signing_key))
    return items


def create_file_once(path: Path, make: Callable[[], bytes]) -> bool:
    """Create `path` (mode 0600) with `make()`'s bytes unless it exists; return whether it did.

    Written whole to a temporary file, then hard-linked into place: a process starting at the
    same time never reads a half-written file, and the loser of the race keeps the winner's.
    """
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(make())
        os.link(tmp, path)
    except FileExistsError:
        return False  # another process won the race: its file stays
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _private(folder: Path) -> None:
    """Take the group's and others' bits off the local state's folder (when this user owns it).

    It holds the SQLite database, the local cluster's run folders and the artifacts, which
    SQLite and the tasks create with the umask's modes (0644, 0755): without this, any account
    of the machine could read every user's configs, logs and results.
    """
    info = folder.stat()
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        folder.chmod(info.st_mode & 0o700)


def prepare_local_state() -> list[Path]:
    """Create the missing folders and files of the local state; return what was created.

    Idempotent: an existing file is never replaced. The settings of the calling process were
    read before the files existed, so SECRET_KEY and FALCON_INTERNAL_TOKEN are refreshed from
    their files here: a process may prepare and then serve.
    """
    created: list[Path] = []
    for folder in [Path(settings.VAR_DIR), *_database_folders()]:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            created.append(folder)
    _private(Path(settings.VAR_DIR))
    for item in _files():
        if create_file_once(item.path, item.make):
            created.append(item.path)
    from falcon_site.settings.base import read_secret

    if settings.FALCON_SECRET_KEY_FILE:
        settings.SECRET_KEY = read_secret(Path(settings.FALCON_SECRET_KEY_FILE))
    if settings.FALCON_INTERNAL_TOKEN_FILE:
        settings.FALCON_INTERNAL_TOKEN = read_secret(Path(settings.FALCON_INTERNAL_TOKEN_FILE))
    return created


def check_local_state(app_configs=None, **kwargs) -> list[Error]:
    """System check: every file of the local state the settings read exists."""
    errors = []
    for item in _files():
        if not item.path.is_file():
            hint = f"Create it with `{PREPARE}`" + (f", {item.alternative}"
                                                     if item.alternative else "")
            errors.append(Error(f"The file {item.path} does not exist: {item.why}.",
                                hint=f"{hint}.", id=item.check_id))
    return errors
