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

test: setup aws-tools lint ## linters, type checks and the whole test suite (AWS stack checks included)
	$(BIN)/pytest

unit: setup ## the fast tests only (no Spark)
	$(BIN)/pytest -m "not spark"

lint: setup
	$(BIN)/ruff check glue tests functions
	$(BIN)/ruff format --check glue tests functions
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format glue tests functions
	$(BIN)/ruff check --fix glue tests functions

wheel: setup ## the cdclake wheel AWS Glue installs (--additional-python-modules)
	$(BIN)/python -m pip wheel --no-deps --wheel-dir dist .

# ------------------------------------------------------------------------------ benchmarks
# Not part of `make test`. PROFILE=quick (< 10 min on 2 cores), full (the issue's 10M-row sizes) or
# smoke (a harness check in 2-4 minutes). Writes docs/benchmarks.md, docs/benchmarks-<profile>.json and docs/benchmarks.png.
PROFILE ?= quick

.PHONY: bench bench-full bench-profile

bench: setup ## benchmarks: ratios against baselines measured in the same run (docs/benchmarks.md)
	$(BIN)/python -m bench.run --profile $(PROFILE)

bench-full: setup ## the larger profile: 10M rows, 1M changes (about 15 minutes on 2 cores)
	$(BIN)/python -m bench.run --profile full

bench-profile: setup ## every Spark job of a full load and a CDC apply, with its time (ROWS=1000000)
	$(BIN)/python -m bench.profile --rows $(or $(ROWS),1000000)

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
export SAM_CLI_TELEMETRY := 0

.PHONY: aws-tools aws-test sam-build deploy

$(SAM):
	$(PYTHON) -m venv $(TOOLS)/sam
	$(TOOLS)/sam/bin/python -m pip install --quiet --disable-pip-version-check aws-sam-cli==$(SAM_CLI_VERSION)

$(CHECKOV):
	$(PYTHON) -m venv $(TOOLS)/checkov
	$(TOOLS)/checkov/bin/python -m pip install --quiet --disable-pip-version-check checkov==$(CHECKOV_VERSION)

aws-tools: setup $(SAM) $(CHECKOV) ## SAM CLI and checkov, in their own virtual environments

aws-test: aws-tools ## the AWS stack tests, static checks included
	$(BIN)/ruff check functions tests/aws
	$(BIN)/ruff format --check functions tests/aws
	$(BIN)/pytest tests/aws

sam-build: aws-tools ## Lambda code -> build/sam
	$(SAM) build --build-dir build/sam --region us-east-1

deploy: aws-tools wheel sam-build ## build and deploy everything: make deploy [SAM_ENV=prod] PARAMS="Key=Value ..."
	$(SAM) deploy --config-env $(SAM_ENV) --template-file build/sam/template.yaml \
		$(if $(PARAMS),--parameter-overrides $(PARAMS))
	$(SAM) list stack-outputs --config-env $(SAM_ENV) --output json > build/stack-outputs.json
	$(BIN)/python -c "import boto3, json, glob; \
	out = {o['OutputKey']: o['OutputValue'] for o in json.load(open('build/stack-outputs.json'))}; \
	s3 = boto3.client('s3'); bucket = out['ArtifactsBucketName']; \
	[s3.upload_file(f, bucket, 'glue/' + f.split('/')[-1]) for f in glob.glob('glue/jobs/*.py')]; \
	[s3.upload_file(w, bucket, 'glue/' + w.split('/')[-1]) for w in glob.glob('dist/cdclake-*.whl')]; \
	print('uploaded the Glue entry points and the wheel to s3://' + bucket + '/glue/')"
