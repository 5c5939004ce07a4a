# dream-worker — `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help install run demo test test-fast lint typecheck migrate check-migrations bench eval clean

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install the worker with its dev tools

run: $(STAMP) ## Set up and run the main job on the embedded default (SQLite, rule-based judge): the demo dream
	$(BIN)/dream db upgrade
	$(BIN)/dream demo

demo: run ## Alias of run

test: $(STAMP) ## Set up and run every test (unit, SQLite, PostgreSQL+pgvector, Redis + Celery)
	$(BIN)/pytest

test-fast: $(STAMP) ## Unit tests only
	$(BIN)/pytest -m unit -q

lint: $(STAMP) ## ruff (incl. complexity) and the import contracts (lint-imports, see pyproject)
	$(BIN)/ruff check worker tests migrations
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP) ## mypy --strict on the package and every test (strict is set in pyproject)
	$(BIN)/mypy worker tests

migrate: $(STAMP) ## Apply migrations to DREAM_DATABASE_URL (default: the SQLite file)
	$(BIN)/dream db upgrade

check-migrations: $(STAMP) ## Fail if models changed without a migration
	$(BIN)/pytest -q tests/store/test_migrate.py

$(VENV)/.bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@touch $@

bench: $(VENV)/.bench ## Performance benchmark, with the peer kore-memory (prints tables; see README "Benchmarks")
	$(BIN)/python -m tests.bench.run $(BENCH_ARGS)

eval: $(STAMP) ## Quality evaluation: ../shared/eval-data (skips what is absent) and the evolving-fact suite
	$(BIN)/python -m tests.bench.eval

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
