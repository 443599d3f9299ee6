# lakepurge: `make demo` runs the whole pipeline on the embedded local stack; `make test` runs lint and tests.
# Both create .venv and install what they need on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.DEFAULT_GOAL := help
.PHONY: help install lock demo test unit lint audit format bench package wheel-check spark35 clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

# .venv holds exactly requirements/dev.lock (hash-checked), then lakepurge itself (editable, built with the lock's
# setuptools); `make lock` regenerates the locks from pyproject.toml (see docs/DEPLOY.md, Reproducible builds).
$(STAMP): pyproject.toml requirements/dev.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "lakepurge needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements/dev.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

install: $(STAMP) ## create .venv with lakepurge and its development tools, from requirements/dev.lock

# uv, which `make lock` runs, in a virtualenv of its own under the git-ignored build/ (hash-pinned in requirements/uv-tool.lock)
LOCK_TOOLS       ?= build/venv-lock
LOCK_TOOLS_STAMP := $(LOCK_TOOLS)/.installed-uv

$(LOCK_TOOLS_STAMP): requirements/uv-tool.lock
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install --quiet --require-hashes -r requirements/uv-tool.lock
	@touch $@

lock: $(LOCK_TOOLS_STAMP) ## regenerate requirements/{dev,runtime,tools}.lock (with hashes) from pyproject.toml and infra/requirements-tools.txt; LOCK_ARGS=--upgrade for the newest releases
	$(PYTHON) requirements/lock.py --uv $(LOCK_TOOLS)/bin/uv $(LOCK_ARGS)

# checkov and pip-audit live in a virtualenv of their own: checkov pins many libraries that must not meet .venv's.
# requirements/tools.lock pins infra/requirements-tools.txt with hashes (`make lock`).
TOOLS       ?= .venv-tools
TOOLS_STAMP := $(TOOLS)/.installed-tools

$(TOOLS_STAMP): requirements/tools.lock
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --upgrade pip
	$(TOOLS)/bin/pip install --quiet --require-hashes -r requirements/tools.lock
	@touch $@

demo: $(STAMP) ## the whole pipeline on a local stack: sample lake indexed by S3 events, reconcile, request, approval, purge, certificate
	$(BIN)/lakepurge demo

lint: $(STAMP) $(TOOLS_STAMP) ## ruff, ruff format --check, mypy, cfn-lint and checkov (the SAM template, then its translation)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/cfn-lint infra/template.yaml
	$(BIN)/python infra/translate.py --out build/lint/template.json
	$(BIN)/cfn-lint build/lint/template.json
	$(TOOLS)/bin/checkov --config-file infra/checkov-skips.yaml -f infra/template.yaml -f build/lint/template.json

audit: $(STAMP) $(TOOLS_STAMP) ## pip-audit of .venv's dependencies (a WARNING, exit 0, when the vulnerability database is unreachable)
	@mkdir -p build/audit
	$(BIN)/pip freeze --exclude-editable > build/audit/requirements.txt
	$(BIN)/python infra/audit.py --pip-audit $(TOOLS)/bin/pip-audit --requirements build/audit/requirements.txt

test: lint ## lint, then unit, integration and e2e tests (starts its own PostgreSQL, moto server, Spark)
	$(BIN)/pytest -q

unit: $(STAMP) ## the unit tier only: domain rules on an in-memory index, no network, in seconds
	$(BIN)/pytest -q tests/unit -p no:cacheprovider -n 2

# The EMR release's Spark (3.5) runs the jobs on AWS; the tests run the locked pyspark (4.x). This runs the tests that
# start Spark (the session's, or spark-submit of a job script) again on pyspark 3.5, put first on PYTHONPATH.
PYSPARK35 := build/pyspark35
spark35: $(STAMP) requirements/pyspark35.lock ## the Spark-touching tests again on pyspark 3.5, the Spark of the template's EMR release
	$(BIN)/pip install --quiet --no-deps --require-hashes --upgrade --target $(PYSPARK35) -r requirements/pyspark35.lock
	PYTHONPATH=$(CURDIR)/$(PYSPARK35) LAKEPURGE_SPARK_ONLY=1 $(BIN)/pytest -q

wheel-check: $(STAMP) ## build the wheel, install it in a fresh venv outside the checkout, run `lakepurge demo --json` there
	$(BIN)/python infra/wheel_check.py

format: $(STAMP) ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP) ## index, purge and erase-path benchmarks (print figures; see bench/README.md)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/index_bench.py
	$(BIN)/python bench/purge_bench.py
	$(BIN)/python bench/erase_path_bench.py

LAMBDA_ARCH  ?= x86_64
SPARK_PYTHON ?= $(BIN)/python

package: $(STAMP) requirements/runtime.lock requirements/spark.lock ## build/lambda (function code + dependencies layer) and build/spark (EMR Serverless archive); see docs/DEPLOY.md
	$(BIN)/python infra/package.py lambda --arch $(LAMBDA_ARCH)
	$(BIN)/python infra/package.py spark --python $(SPARK_PYTHON)

# `sam build` at the repository root builds the template's DependenciesLayer with this target (BuildMethod makefile,
# samconfig.toml: build in source): build/lambda/{code,layer}, then the layer into SAM's ARTIFACTS_DIR.
build-DependenciesLayer: $(STAMP) requirements/runtime.lock
	$(BIN)/python infra/package.py lambda --arch $(LAMBDA_ARCH)
	cp -R build/lambda/layer/. "$(ARTIFACTS_DIR)"

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) $(TOOLS) $(LOCK_TOOLS) .aws-sam .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
