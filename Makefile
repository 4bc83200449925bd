# Two commands: `make demo` and `make test`. Both bootstrap .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

TOOLS := .tools/.installed
ALLURE_VERSION := 2.46.1

.PHONY: demo test lint typecheck docs unit tools clean

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

# the manual: docs/ rendered into site/ by MkDocs, strict (mkdocs.yml): a broken link or anchor fails the build
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

# what the report tests drive: Debian's chromium (headless browser), Java 17 and the Allure commandline (npm);
# and kubectl (Debian's kubernetes-client), whose built-in kustomize renders deploy/ for its test.
# A machine where these cannot be installed still runs every other test; those tests skip and say why.
$(TOOLS):
	@command -v java >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq openjdk-17-jre-headless >/dev/null) || echo "WARNING: could not install Java 17"
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium >/dev/null) || echo "WARNING: could not install chromium"
	@command -v kubectl >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq kubernetes-client >/dev/null) || echo "WARNING: could not install kubectl"
	@mkdir -p .tools
	npm install --prefix .tools --no-save --no-audit --no-fund --loglevel=error allure-commandline@$(ALLURE_VERSION) \
		|| echo "WARNING: could not install allure-commandline"
	touch $(TOOLS)

tools: $(TOOLS)

unit: $(STAMP) $(TOOLS)
	$(BIN)/pytest -n 2 --dist worksteal -p no:cacheprovider

test: lint typecheck docs unit

clean:
	rm -rf $(VENV) reports site .mypy_cache .ruff_cache
