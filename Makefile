PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0  # first: a CPU build on local disk, not the CUDA one
	$(BIN)/pip install -q -e '.[dev,models,training]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dragon demo

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

test-all: $(STAMP)  # also the slow tests
	$(BIN)/python -m pytest -q -m 'not gpu' tests
	DRAGON_HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest -q tests/test_roundtrip.py

lint: $(STAMP)
	$(BIN)/ruff check dragon_dsl codegen training tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_codec.py
	$(BIN)/python benchmarks/bench_measure.py
	$(BIN)/python benchmarks/bench_prompts.py
	$(BIN)/python benchmarks/bench_sampling.py
	$(BIN)/python benchmarks/bench_constraints.py

clean:
	rm -rf $(VENV) build dist *.egg-info
