#!/usr/bin/env bash
# `make test`: the SQLite and the MariaDB passes side by side, each pass's output printed whole
# when it ends (the two never interleave), then one result line; exits non-zero if either fails.
#
# Side by side because most of a pass is waiting (for a subprocess platform to start, a
# controller's tick, a live server's reply), so two passes on 2 CPUs take little more than the
# longer one (docs/testing.md has the figures). The MariaDB pass runs only the tests that touch the
# database (`--database-tests-only`): the SQLite pass runs every test once.
set -u
cd "$(dirname "$0")/.."

logs=$(mktemp -d "${TMPDIR:-/tmp}/falcon-test.XXXXXX")
start=$(date +%s)
make --no-print-directory test-sqlite >"$logs/sqlite.log" 2>&1 &
sqlite=$!
make --no-print-directory test-mariadb >"$logs/mariadb.log" 2>&1 &
mariadb=$!
# Ctrl-C or a kill of `make test` ends both passes (each make ends its pytest).
trap 'kill "$sqlite" "$mariadb" 2>/dev/null; wait; exit 130' INT TERM

declare -A result
for pass in sqlite mariadb; do
  pid=${!pass}
  wait "$pid"
  code=$?
  result[$pass]=$code
  cat "$logs/$pass.log"
  echo "== the $pass pass ended after $(( $(date +%s) - start )) s (exit $code)"
done

verdict() { [ "$1" -eq 0 ] && echo passed || echo "FAILED (exit $1)"; }
elapsed=$(( $(date +%s) - start ))
echo "== make test: SQLite $(verdict "${result[sqlite]}"), MariaDB $(verdict "${result[mariadb]}")," \
     "in $((elapsed / 60)) min $((elapsed % 60)) s; logs in $logs"
[ "${result[sqlite]}" -eq 0 ] && [ "${result[mariadb]}" -eq 0 ]
