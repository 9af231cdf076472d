# `make demo` runs the main example, `make test` the whole suite. Both create or reuse `.venv`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# NOTE: torch first, pinned: the CPU build is cached here; any other pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) examples/train.py

test: $(STAMP)
	$(PY) -m ruff check lightning_shard tests examples benchmarks
	$(PY) -m ruff format --check lightning_shard tests examples benchmarks
	$(PY) -m mypy lightning_shard
	OMP_NUM_THREADS=1 $(PY) -m pytest -q

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_index.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_loaders.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_lightning.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_streaming.py
