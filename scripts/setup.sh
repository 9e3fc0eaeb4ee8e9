#!/usr/bin/env bash
# Set up Falcon on a fresh Debian machine: system packages, virtualenv, Python packages, database.
# Idempotent: re-running it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# mysqlclient builds from source: it needs the MySQL/MariaDB client headers and pkg-config.
# chromium: the admin's browser test drives Debian's Chromium with Playwright (no browser
# download: Playwright is told to launch /usr/bin/chromium).
# wrk: bench/api.py's load generator (C, a fraction of the CPU a Python client takes).
missing=()
for pkg in default-libmysqlclient-dev pkg-config chromium wrk; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python packages (requirements.txt)"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  .venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
  echo "$want" > "$stamp"
fi
# The local state the settings read (var/, the secret key, the internal token, the local
# issuer's signing key; existing files are kept), then the database.
.venv/bin/python manage.py prepare | sed "s/^/setup: /"
.venv/bin/python manage.py migrate --noinput -v0
echo "setup: done (python: .venv/bin/python, CLI: .venv/bin/falcon)"
