# Ripple: `make run` starts the platform with an example; `make test` runs the suite.
# Both set up what they need (a virtualenv with the locked dependencies) themselves.
SHELL := /bin/bash
PYTHON ?= python3
UV ?= $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
VENV := .venv
BIN := $(VENV)/bin
export UV_PROJECT_ENVIRONMENT := $(VENV)
CODE := platform subscribers workflows testing
# mypy also checks tests/ (pyproject.toml relaxes two rules there).
TYPED := $(CODE) tests

.PHONY: setup chromium pgbouncer autofailover bench-scale bench-big screenshots run dev test test-unit test-int test-e2e chaos lint fmt typecheck bench bench-search bench-dbos clean

# uv installs itself into .tools when it is missing; `uv sync --locked` is idempotent and
# re-installs the project (strict editable) only when its files change.
$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv

# Bytecode is compiled at install, as pip does: the environment may set PYTHONDONTWRITEBYTECODE,
# and then every process (each CLI command, each test worker) would compile every module it
# imports, over 1 s of CPU for `ripple runs list` (bench/cli_startup.py shows both figures).
# compileall covers Ripple's own modules (linked into build/ by the strict editable install);
# it only rewrites what changed.
setup: $(UV) chromium pgbouncer
	@UV_COMPILE_BYTECODE=1 $(UV) sync --locked --quiet --python $(PYTHON)
	@$(BIN)/python -m compileall -q build

# The dashboard's browser tests drive Debian's Chromium (Playwright cannot download its own).
chromium:
	@test -x /usr/bin/chromium || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
		echo "warning: /usr/bin/chromium missing; install it for tests/e2e/test_ui_browser.py"; }

# tests/pgbouncer runs the core end-to-end tests through Debian's PgBouncer (transaction mode).
pgbouncer:
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq pgbouncer >/dev/null) || \
		echo "warning: pgbouncer missing; install it for tests/pgbouncer"; }

# The chaos battery's Postgres failover runs on Debian's pg_auto_failover.
autofailover:
	@command -v pg_autoctl >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq postgresql-15-auto-failover >/dev/null) || \
		echo "warning: pg_autoctl missing; install postgresql-15-auto-failover for make chaos"; }

run: setup
	$(BIN)/ripple dev --app examples.onboarding

dev: run

# --dist loadgroup: tests/conftest.py sends each module with processes of its own (a server, a
# browser) to one worker, which starts them once; other tests are handed out one at a time.
# tests/chaos runs in `make chaos` (full profile); worker SIGKILLs mid-step and Redis down stay
# here in tests/e2e/resilience and tests/integration/platform/test_wake_redis.py.
test: setup
	$(BIN)/pytest -n 2 --dist loadgroup --ignore=tests/chaos $(PYTEST_ARGS)

test-unit: setup
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test-int: setup
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

test-e2e: setup
	$(BIN)/pytest tests/e2e $(PYTEST_ARGS)

# The chaos battery in its full profile (each test owns its Postgres cluster and redis-server;
# `make test` runs the reduced profile). Prints each test's figures; bounded to 10 minutes.
chaos: setup autofailover
	RIPPLE_CHAOS=full timeout 900 $(BIN)/pytest tests/chaos tests/e2e/resilience \
		tests/e2e/test_worker_shutdown.py -p no:randomly -s -q $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(TYPED)
	$(BIN)/lint-imports

fmt: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: setup
	$(BIN)/mypy $(TYPED)

bench: setup
	$(BIN)/python -m bench $(BENCH_ARGS)

# Scale-out: 1-8 worker and 1-4 publisher processes on one Postgres of its own (see docs/scaling.md).
bench-scale: setup
	$(BIN)/python -m bench --only scale

# Big tables: seeds 10M events, 1M runs, 10M journal rows (RIPPLE_BIG_* to size it), measures
# claims, publish, list pages and a retention sweep against a partition drop (docs/scaling.md).
bench-big: setup
	$(BIN)/python -m bench --only big

# Run and event search over 1M runs and 10M events (seeding them takes minutes).
bench-search: setup
	$(BIN)/python -m bench --only search

# The dashboard's pages over the example app, captured into docs/img/ (needs /usr/bin/chromium).
screenshots: setup
	$(BIN)/python -m bench.screenshots

# DBOS on the same Postgres for comparison, in a throwaway environment (not a project dependency).
bench-dbos: $(UV)
	$(UV) run --no-project --with dbos --with asyncpg python bench/dbos_compare.py

clean:
	rm -rf $(VENV) .tools build .ripple .pytest_cache .mypy_cache .ruff_cache
