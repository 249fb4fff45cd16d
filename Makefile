# One command each: `make test`, `make plan STACK=dev`, `make up STACK=dev`, `make destroy STACK=dev`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
OUT ?= plan-$(STACK)
# Local file state backend, used unless PULUMI_BACKEND_URL is set or `pulumi login` was done before.
STATE_DIR ?= $(HOME)/.pulumi-ray-llm-eks

.PHONY: test plan up destroy login passphrase clean

$(VENV)/.installed: requirements.txt requirements-dev.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	touch $@

test: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

plan: $(VENV)/.installed
	$(BIN)/python -m offline.plan --stack $(STACK) --out $(OUT)

login:
	@command -v pulumi >/dev/null || { echo "The Pulumi CLI is not installed: https://www.pulumi.com/docs/install/"; exit 1; }
	@if [ -n "$$PULUMI_BACKEND_URL" ] || pulumi whoami >/dev/null 2>&1; then \
		pulumi whoami --verbose | grep -i 'backend url' || true; \
	else \
		mkdir -p "$(STATE_DIR)" && pulumi login "file://$(STATE_DIR)"; \
	fi

# The local backend encrypts stack secrets (hfToken) with a passphrase; pulumi reads it from the
# environment so nothing prompts mid-deploy.
passphrase:
	@backend="$${PULUMI_BACKEND_URL:-$$(pulumi whoami --verbose 2>/dev/null | awk -F': *' 'tolower($$1) ~ /backend url/ {print $$2}')}"; \
	if [[ "$$backend" == file://* ]] && [ -z "$$PULUMI_CONFIG_PASSPHRASE$$PULUMI_CONFIG_PASSPHRASE_FILE" ]; then \
		echo "Set PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE first (it encrypts this stack's secrets)."; \
		exit 1; \
	fi

# A new stack on the local backend gets the passphrase secrets provider; on Pulumi Cloud, its default.
up: $(VENV)/.installed login passphrase
	@backend="$${PULUMI_BACKEND_URL:-$$(pulumi whoami --verbose 2>/dev/null | awk -F': *' 'tolower($$1) ~ /backend url/ {print $$2}')}"; \
	if [[ "$$backend" == file://* ]]; then provider="--secrets-provider passphrase"; fi; \
	pulumi stack select --create $$provider $(STACK)
	pulumi up --stack $(STACK)

destroy: $(VENV)/.installed login passphrase
	pulumi destroy --stack $(STACK)

clean:
	rm -rf $(VENV) plan-*/ .pytest_cache .ruff_cache
