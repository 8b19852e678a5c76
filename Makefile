# hotloop: `make demo` sets up and trains the default recipe; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test lint clean gpu-check

setup: $(VENV)/.installed

# The pinned CPU build of torch goes in first when none is importable: the package's own range
# (torch>=2.6) would otherwise let pip pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev,test]"
	touch $@

demo: setup
	$(BIN)/hotloop fit

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check hotloop tests
	$(BIN)/ruff format --check hotloop tests

clean:
	rm -rf $(VENV) runs .pytest_cache

# On a CUDA machine (no network needed): install hotloop into that machine's Python, run tests/gpu and the
# CUDA benchmarks, print one table (JSON under $$OUT when set). See tests/gpu/check.py.
gpu-check:
	$(PYTHON) -m pip install -q --no-deps --no-build-isolation -e .
	$(PYTHON) tests/gpu/check.py
