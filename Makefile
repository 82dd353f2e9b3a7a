# cdclake — every setup step lives here; `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup demo demo-postgres test unit lint format wheel clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/install-system-deps.sh
	scripts/install-system-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[local,dev]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: setup ## the Airbnb hosts example end to end on local Spark + Iceberg
	$(BIN)/cdclake demo

demo-postgres: setup ## a real PostgreSQL source: capture, apply, verify (scripts/demo-postgres.sh)
	scripts/demo-postgres.sh

# Two pytest workers, each taking a whole file at a time (its module fixtures built once): a test's
# small Spark jobs keep about one core busy, so two JVMs fill a 2-core machine. WORKERS=0: one process.
WORKERS ?= 2
test: setup aws-tools lint bench-check ## linters, type checks, the benchmark harness's self-check and the whole test suite (AWS stack checks included)
	$(BIN)/pytest -n $(WORKERS) --dist loadfile

unit: setup ## the fast tests only: no Spark, no SAM CLI, checkov or moto server, no state machine runs
	$(BIN)/pytest -m "not spark and not stack"

lint: setup
	$(BIN)/ruff check glue tests functions scripts
	$(BIN)/ruff format --check glue tests functions scripts
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format glue tests functions
	$(BIN)/ruff check --fix glue tests functions

docs-tables: setup ## the docs' tables made from the code's declarations: settings (configuration.md), alarms (runbook.md)
	$(BIN)/python scripts/docs_tables.py

wheel: setup ## the cdclake wheel AWS Glue installs (--additional-python-modules)
	$(BIN)/python -m pip wheel --no-deps --wheel-dir dist .

# ------------------------------------------------------------------------------ benchmarks
# Not part of `make test`. PROFILE=quick (< 10 min on 2 cores; with the pyiceberg peer; then about 6 min of
# follow benchmarks, freshness for 1 min and warm vs cold in one new JVM: ARGS=--no-follow skips them), full (the
# target 10M-row sizes), scale (the same 100k changes into fresh 1M, 10M and 50M-row tables, beside a plain MERGE;
# writes docs/benchmarks-scale.png instead of docs/benchmarks.png) or smoke (a harness check in 2-4 minutes).
# Writes docs/benchmarks.md, docs/benchmarks-<profile>.json and docs/benchmarks.png.
PROFILE ?= quick

.PHONY: bench bench-check bench-full bench-profile bench-big-csv bench-throughput bench-freshness bench-warm bench-status bench-table-cost bench-commit-overlap bench-cut-publish bench-verify bench-bronze-age bench-history

bench: setup bench-check ## benchmarks: ratios against baselines measured in the same run (docs/benchmarks.md)
	$(BIN)/python -m bench.run --profile $(PROFILE) $(ARGS)

bench-check: setup ## the benchmark harness checks its own pure parts (seconds; tests/ tests the product)
	$(BIN)/python -m bench.selfcheck

bench-full: setup ## the larger profile: 10M rows, 1M changes (about 15 minutes on 2 cores)
	$(BIN)/python -m bench.run --profile full

bench-profile: setup ## every Spark job of a full load and a CDC apply, with its time (ROWS=1000000)
	$(BIN)/python -m bench.profile --rows $(or $(ROWS),1000000)

bench-throughput: setup ## keeping up on AWS, simulated: 10/100/300 tables x a file a minute, warm loop vs a run per 10 files
	$(BIN)/python -m bench.throughput --tables $(or $(TABLES),10 100 300) --minutes $(or $(MINUTES),15) \
		--out docs/benchmarks-throughput.json

bench-big-csv: setup ## one big CSV LOAD file loaded whole vs in parallel splits (ROWS=8000000, about 1 GB)
	$(BIN)/python -m bench.big_csv --rows $(or $(ROWS),8000000)

bench-freshness: setup ## lag from a PostgreSQL commit to silver: capture --follow + run --follow (MINUTES=3, TABLES=30)
	$(BIN)/python -m bench.freshness --minutes $(or $(MINUTES),3) --tables $(or $(TABLES),30) --docs docs

bench-verify: setup ## verify at size (ROWS=1000000): key-range checksums vs every row read vs a plain SELECT, on a local PostgreSQL
	$(BIN)/python -m bench.verify --rows $(or $(ROWS),1000000)

bench-commit-overlap: setup ## how many tables' data commits run at once in a warm round (TABLES=30; 300)
	$(BIN)/python -m bench.commit_overlap --tables $(or $(TABLES),30)

bench-table-cost: setup ## where one more table's time goes in a CDC batch (TABLES=30): the engine's functions by time per table, beside the bare MERGE
	$(BIN)/python -m bench.table_cost --tables $(or $(TABLES),30)

bench-cut-publish: setup ## publishing a consistent cut at TABLES=300 tables (the record and each table's tags): the engine's way vs a statement per table
	$(BIN)/python -m bench.cut_publish --tables $(or $(TABLES),300)

bench-history: setup ## a small batch's history commit (KEYS=10000, CHANGES=20): written by the driver as one RowDelta vs one Spark MERGE
	$(BIN)/python -m bench.history_apply --keys $(or $(KEYS),10000) --changes $(or $(CHANGES),20)

bench-status: setup ## `status` on 40 small tables (TABLES=40): per table as before vs now (same run, same answer), and the command from a new process
	$(BIN)/python -m bench.status --tables $(or $(TABLES),40)

bench-bronze-age: setup ## a CDC run and a follow round with one new file per table, bronze and ledger holding 1k vs 1M keys (docs/benchmarks.md)
	$(BIN)/python -m bench.bronze_age --small $(or $(SMALL),1000) --large $(or $(LARGE),1000000)

bench-warm: setup ## the same 30-table batch as a new JVM's first and tenth batch (PROCESSES=2)
	$(BIN)/python -m bench.warm_cold --processes $(or $(PROCESSES),2) --docs docs

clean:
	rm -rf $(VENV) .cdclake dist build glue/*.egg-info .pytest_cache .mypy_cache .ruff_cache

# ------------------------------------------------------------------------------ the AWS stack
# SAM CLI and checkov pin boto3 versions that conflict with ours (and with each other): each gets its
# own virtual environment under .venv/tools. `make aws-tools` once; tests/aws skips their checks without them.
SAM_CLI_VERSION := 1.170.0
CHECKOV_VERSION := 3.3.30
TOOLS   := $(VENV)/tools
SAM     := $(TOOLS)/sam/bin/sam
CHECKOV := $(TOOLS)/checkov/bin/checkov
SAM_ENV ?= default
PARAMS  ?=
CONFIG  ?=
export SAM_CLI_TELEMETRY := 0
# Deploying needs only Python and the SAM CLI (works on macOS): no `make setup` (Java, PostgreSQL, Spark).
# The SAM CLI's own virtual environment builds the wheel (pip), reads samconfig.toml (tomlkit) and uploads (boto3).
DEPLOY_PY := $(TOOLS)/sam/bin/python
# The environment's parameter_overrides (samconfig.toml), evaluated when a recipe runs (after $(SAM) exists).
ENV_PARAMS = $(shell $(DEPLOY_PY) -c "import tomlkit; c = tomlkit.parse(open('samconfig.toml').read()); \
	print(c['$(SAM_ENV)']['deploy']['parameters'].get('parameter_overrides', ''))")
# The environment's stack name and region (samconfig.toml's global parameters), for the preflight.
SAM_GLOBAL = $(shell $(DEPLOY_PY) -c "import tomlkit; c = tomlkit.parse(open('samconfig.toml').read()); \
	print(c['$(SAM_ENV)']['global']['parameters']['$(1)'])")

.PHONY: aws-tools aws-test sam-build deploy-wheel deploy verify-deploy destroy try-aws

$(SAM):
	$(PYTHON) -m venv $(TOOLS)/sam
	$(TOOLS)/sam/bin/python -m pip install --quiet --disable-pip-version-check aws-sam-cli==$(SAM_CLI_VERSION)

$(CHECKOV):
	$(PYTHON) -m venv $(TOOLS)/checkov
	$(TOOLS)/checkov/bin/python -m pip install --quiet --disable-pip-version-check checkov==$(CHECKOV_VERSION)

aws-tools: setup $(SAM) $(CHECKOV) ## SAM CLI and checkov, in their own virtual environments

try-aws: setup aws-tools ## the stack deployed to a local emulator, the demo's files through it (no AWS account)
	$(BIN)/python scripts/try_aws.py

aws-test: aws-tools ## the AWS stack tests, static checks included
	$(BIN)/ruff check functions tests/aws
	$(BIN)/ruff format --check functions tests/aws
	$(BIN)/pytest tests/aws

sam-build: $(SAM) ## Lambda code -> build/sam
	$(SAM) build --config-env $(SAM_ENV) --build-dir build/sam

deploy-wheel: $(SAM) ## the cdclake wheel and its zip of wheels for the Glue jobs, without `make setup`
	rm -f dist/cdclake-*.whl dist/cdclake-*.gluewheels.zip  # one wheel: the one the stack's LibraryWheelKey names
	$(DEPLOY_PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir dist .
	$(DEPLOY_PY) scripts/stack_artifacts.py glue-wheels

# make deploy [SAM_ENV=prod] [CONFIG=cdclake.yaml] PARAMS="ReplicationTaskArns=arn:... AlertEmail=ops@example.com"
# --config-file: with --template-file build/sam/template.yaml, sam looks for samconfig.toml next to that template.
# The preflight refuses a deploy the jobs could not run with (no CONFIG and none in the stack's bucket) before
# anything is deployed, and prints the overrides the deploy needs: the built wheel's LibraryWheelKey and, after
# `make destroy`, ExistingSilverDatabase/ExistingGoldDatabase=true for the retained databases (docs/deploy.md).
deploy: $(SAM) deploy-wheel sam-build ## build and deploy everything: stack, Glue entry points, wheel, table configuration
	mkdir -p build
	$(DEPLOY_PY) scripts/stack_artifacts.py preflight --stack-name $(call SAM_GLOBAL,stack_name) \
		--region $(call SAM_GLOBAL,region) --parameters "$(ENV_PARAMS) $(PARAMS)" $(if $(CONFIG),--config $(CONFIG)) \
		> build/deploy-overrides.txt
	$(SAM) deploy --config-env $(SAM_ENV) --config-file $(CURDIR)/samconfig.toml --template-file build/sam/template.yaml \
		--parameter-overrides $(ENV_PARAMS) $$(cat build/deploy-overrides.txt) $(PARAMS)
	$(SAM) list stack-outputs --config-env $(SAM_ENV) --output json > build/stack-outputs.json
	$(DEPLOY_PY) scripts/stack_artifacts.py upload --region $(call SAM_GLOBAL,region) \
		--outputs build/stack-outputs.json $(if $(CONFIG),--config $(CONFIG))

# What only the real account can show, checked once after the first deploy (docs/deploy.md, "What a real account
# still has to prove"): the new-file rule delivers a test file's event (its metrics; the queue is never read), and a
# test alarm reaches the alert topic.
verify-deploy: $(SAM) ## after make deploy: S3 -> EventBridge -> queue, and alarm -> alert topic, in the real account
	mkdir -p build
	$(SAM) list stack-outputs --config-env $(SAM_ENV) --output json > build/stack-outputs.json
	$(DEPLOY_PY) scripts/stack_artifacts.py verify --region $(call SAM_GLOBAL,region) --outputs build/stack-outputs.json

# Stops the running executions and deletes the stack. Kept (DeletionPolicy Retain): the silver and bronze
# buckets, the Glue database and the access-log bucket. The artifacts bucket (scripts, wheel, configuration,
# manifests; also retained by the stack) is emptied of every version and deleted after the stack.
# docs/deploy.md, "Tearing down".
destroy: $(SAM) ## delete the stack, keep the lake: make destroy [SAM_ENV=prod]
	mkdir -p build
	$(SAM) list stack-outputs --config-env $(SAM_ENV) --output json > build/stack-outputs.json
	$(DEPLOY_PY) scripts/stack_artifacts.py stop-executions --region $(call SAM_GLOBAL,region) --outputs build/stack-outputs.json
	$(SAM) delete --config-env $(SAM_ENV) --no-prompts
	$(DEPLOY_PY) scripts/stack_artifacts.py delete-bucket --region $(call SAM_GLOBAL,region) \
		--outputs build/stack-outputs.json --output-key ArtifactsBucketName
	$(DEPLOY_PY) scripts/stack_artifacts.py retained --outputs build/stack-outputs.json
