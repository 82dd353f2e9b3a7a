# cdclake — every setup step lives here; `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup demo test unit lint format wheel clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/install-system-deps.sh
	scripts/install-system-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[local,dev]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: setup ## the Airbnb hosts example end to end on local Spark + Iceberg
	$(BIN)/cdclake demo

test: setup lint ## linters, type checks and the whole test suite
	$(BIN)/pytest

unit: setup ## the fast tests only (no Spark)
	$(BIN)/pytest -m "not spark"

lint: setup
	$(BIN)/ruff check glue tests
	$(BIN)/ruff format --check glue tests
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format glue tests
	$(BIN)/ruff check --fix glue tests

wheel: setup ## the cdclake wheel AWS Glue installs (--additional-python-modules)
	$(BIN)/python -m pip wheel --no-deps --wheel-dir dist .

clean:
	rm -rf $(VENV) .cdclake dist build glue/*.egg-info .pytest_cache .mypy_cache .ruff_cache
