# foldexp — `make help` lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help install run test lint format bench demo gpu-check clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The pinned CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install foldexp with its test tools (idempotent)

run: $(STAMP) ## run the default experiment (Tree-LSTM on calculator trees, offline)
	$(VENV)/bin/foldexp train

test: $(STAMP) ## run the test suite, one worker process per CPU
	$(PY) -m pytest -q -n auto

lint: $(STAMP) ## ruff format check and lint
	$(VENV)/bin/ruff format --check foldexp tests benchmarks
	$(VENV)/bin/ruff check foldexp tests benchmarks

format: $(STAMP) ## apply ruff formatting and autofixes
	$(VENV)/bin/ruff format foldexp tests benchmarks
	$(VENV)/bin/ruff check --fix foldexp tests benchmarks

bench: $(STAMP) ## engine throughput benchmark (Tree-LSTM, 256 trees of 64 leaves)
	$(PY) benchmarks/engine_treelstm.py

# No $(STAMP): install would put the CPU wheel in; a GPU machine brings its own CUDA torch.
gpu-check: ## gpu tests, each preset's short epoch on CUDA and the peers' step: one table
	$(if $(wildcard $(PY)),$(PY),python3) -m foldexp.bench.gpu_check

demo: $(STAMP) ## print a schedule and the speedup of batching
	$(VENV)/bin/foldexp demo

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache
