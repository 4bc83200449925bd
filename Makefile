# Two commands: `make demo` and `make test`. Both bootstrap .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	# a failed certification (exit 1) is the demo working: it finds the faults injected into the fleet
	$(BIN)/gpucert demo || test $$? -eq 1

lint: $(STAMP)
	$(BIN)/ruff check src fixtures suites tests benchmarks conftest.py
	$(BIN)/ruff format --check src fixtures suites tests benchmarks conftest.py

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -n 2 -p no:cacheprovider

test: lint typecheck unit

clean:
	rm -rf $(VENV) reports .mypy_cache .ruff_cache
