# fsdlite: `make demo` and `make test` set up what is missing, then run.
PYTHON      ?= python3
VENV        ?= .venv
# Override for a CUDA build, e.g. TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"
TORCH_SPEC  ?= torch==2.13.0
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
STAMP       := $(VENV)/.fsdlite-installed
PYTEST_ARGS ?= -n 2

.PHONY: setup ops nvcc-check smoke demo test test-fast clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	@test -x $(PY) || { echo "[setup] creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "[setup] installing $(TORCH_SPEC) first (an exact pin keeps pip from pulling a multi-GB CUDA build)"
	$(PIP) install --progress-bar off $(TORCH_SPEC)
	@echo "[setup] installing fsdlite (editable, no build isolation) with test extras"
	$(PIP) install --progress-bar off --no-build-isolation -e '.[test]'
	@# first import writes yapf's grammar pickles (via mmengine); done once here, parallel test workers race on it
	$(PY) -c "import mmengine"
	@touch $@

ops: setup
	$(PY) -m fsdlite.ops

nvcc-check: setup
	$(PY) -m fsdlite.ops --nvcc-check

# a known invalid call of every op family must raise a Python exception (in a subprocess), not crash
smoke: setup
	$(PY) -m fsdlite.ops --smoke

demo: ops
	$(PY) tools/demo.py

test: ops
	$(PY) -m fsdlite.ops --nvcc-check
	$(PY) -m fsdlite.ops --smoke
	$(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info work_dirs demo_out
