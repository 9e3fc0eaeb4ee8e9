# Falcon: the two commands a new user needs are `make demo` and `make test`.
MARIADB_URL ?= mysql://root@127.0.0.1:3306/test
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup test test-sqlite test-mariadb demo run bench

setup:
	@./scripts/setup.sh

## test: the whole suite on SQLite and, side by side, its database tests on the MariaDB at
## $(MARIADB_URL) (scripts/test.sh; docs/testing.md)
test: setup
	@./scripts/test.sh

## test-sqlite: every test, on SQLite
test-sqlite:
	@echo "== tests on SQLite =="
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Each MariaDB run creates and drops its own database (pytest-django), named uniquely, because
# the server is shared by everything on the machine. The tests that never touch the database
# already ran in the SQLite pass: `--database-tests-only` deselects them (conftest.py).
## test-mariadb: the tests that touch the database, on MariaDB
test-mariadb:
	@echo "== tests on MariaDB ($(MARIADB_URL)) =="
	DATABASE_URL=$(MARIADB_URL) FALCON_TEST_DB_NAME=test_falcon_$$(date +%s)_$$$$ \
		$(PY) -m pytest -q --database-tests-only $(PYTEST_ARGS)

## demo: the whole platform on its embedded defaults, one example experiment run to the end
demo: setup
	$(PY) scripts/demo.py

## run: the whole platform on its embedded defaults, until Ctrl-C
run: setup
	$(PY) manage.py runlocal

## bench: the benchmark scripts (they print figures)
bench: setup
	$(PY) bench/reconcile.py
	$(PY) bench/resources.py
	$(PY) bench/cli_startup.py
	$(PY) bench/analyzer_queue.py
	$(PY) bench/analysis_awaiting.py
