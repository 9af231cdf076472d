# `make demo` runs the main example, `make test` the whole suite (and builds the documentation site with
# --strict), `make docs` the site into site/, `make dist` the sdist and wheel into dist/ (checked by twine),
# `make gpu-check` the CUDA tests (on a GPU machine), `make test-matrix` every cell of the combination
# matrix (long; `make test` runs a sample), `make test-long` the tests marked `long`. All create or reuse
# `.venv`. `make test-oldest` runs the Lightning and loader tests on the oldest supported releases, in
# `.venv-oldest`. `make test-ray` installs the `ray` extra and runs the Ray Train tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OLDEST := .venv-oldest
OLDEST_PY := $(OLDEST)/bin/python
OLDEST_PINS := tests/oldest-constraints.txt
TORCH_PIN := tests/torch-constraints.txt
# NOTE: LitData (a test dependency) requires `torchvision`, and the only one the registry has for torch 2.13 is a
# CUDA build that fails to load against the CPU torch (LitData imports it when present). So LitData installs
# without its dependencies, and these (its own, less `torchvision`) install beside it under the torch pin.
LITDATA := litdata==0.2.76
LITDATA_DEPS := lightning-utilities filelock numpy boto3 requests "urllib3>=1.26" tifffile obstore
# NOTE: mosaicml-streaming (a test dependency, as LitData) requires `torchvision` and `transformers` too, and
# the cloud SDKs; the core the tests use (a local MDS dataset) needs only these, which install beside it.
# Its package `__init__` imports its vision and text modules, so the tests import its core without it
# (`tests/helpers/mosaic.py`).
MOSAIC := mosaicml-streaming==0.13.0
MOSAIC_DEPS := numpy "xxhash<4" zstd Brotli "python-snappy<1" catalogue pillow tqdm filelock

.PHONY: demo test test-long docs dist test-oldest test-matrix test-ray bench gpu-check

$(STAMP): pyproject.toml $(TORCH_PIN)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# NOTE: torch first, pinned: the CPU build is cached here; any other pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c $(TORCH_PIN) -e ".[test,dev]"
	$(PY) -m pip install -q -c $(TORCH_PIN) --no-deps $(LITDATA)
	$(PY) -m pip install -q -c $(TORCH_PIN) $(LITDATA_DEPS)
	$(PY) -m pip install -q -c $(TORCH_PIN) --no-deps $(MOSAIC)
	$(PY) -m pip install -q -c $(TORCH_PIN) $(MOSAIC_DEPS)
	# NOTE: in case anything else pulled `torchvision` in; then check that LitData imports and torch is the pin.
	$(PY) -m pip uninstall -q -y torchvision
	$(PY) -c "import litdata, torch, importlib.util as u; assert torch.__version__.startswith('2.13.0'), torch.__version__; assert u.find_spec('torchvision') is None"
	touch $(STAMP)

# NOTE: torch first, as above; the constraints then hold Lightning and torchdata at the oldest supported
# releases while the package and its test extras install (they would otherwise pull the newest).
$(OLDEST)/.installed: pyproject.toml $(OLDEST_PINS)
	test -x $(OLDEST_PY) || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST_PY) -m pip install -q --upgrade pip
	$(OLDEST_PY) -m pip install -q torch==2.13.0
	$(OLDEST_PY) -m pip install -q -c $(OLDEST_PINS) -e ".[test]"
	$(OLDEST_PY) -m pip check
	touch $(OLDEST)/.installed

demo: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) examples/train.py

test: $(STAMP)
	$(PY) -m ruff check lightning_shard tests examples benchmarks
	$(PY) -m ruff format --check lightning_shard tests examples benchmarks
	$(PY) -m mypy lightning_shard
	# NOTE: not --quiet: it hides the warnings that --strict turns into errors, and the build passes.
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	# NOTE: two pytest workers, a test file each at a time (module fixtures run once): most tests wait on the
	# processes they start, so two files overlap on 2 cores (docs/development.md). The longest files first
	# (tests/conftest.py), not xdist's order by number of tests, so that the two workers end together.
	# NOTE: `-m "not long"`: the tests marked `long` run a second time what this suite covers once (more
	# pages, restarts, combination regressions); `make test-long` runs them, so that this stays under 10 minutes.
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not long"

# NOTE: the tests marked `long` (about 6 minutes on 2 cores): the documentation pages `make test` does not run,
# the restarts onto other process counts, the combination regressions; run it before a release, as `make test-matrix`.
test-long: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m long

# NOTE: every cell of tests/matrix/cells.py (about half an hour on 2 cores, mostly the ModelParallel cells);
# the records stay in build/matrix, the summary is what benchmarks/RELIABILITY.md records. The known
# defects' cells are strict xfails, so the exit status is that of the rest.
MATRIX_OUT := build/matrix
test-matrix: $(STAMP)
	rm -rf $(MATRIX_OUT)
	-MATRIX_ALL=1 MATRIX_OUT=$(MATRIX_OUT) OMP_NUM_THREADS=1 $(PY) -m pytest -q -rfE tests/matrix; echo $$? > $(MATRIX_OUT)/status
	$(PY) -m tests.matrix.summary $(MATRIX_OUT)
	EXIT_STATUS_FITS=20 OMP_NUM_THREADS=1 $(PY) -m pytest -q tests/lightning/test_combinations.py -k exit_zero
	exit $$(cat $(MATRIX_OUT)/status)

# NOTE: --strict turns every warning into an error: a broken link, anchor or API reference fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

test-oldest: $(OLDEST)/.installed
	OMP_NUM_THREADS=1 $(OLDEST_PY) -m pytest -q tests/lightning tests/loaders

# NOTE: opt-in: Ray is heavy (clusters on this machine, of two and three workers; about six minutes), so
# neither the `test` extra nor `make test` has it. This installs the `ray` extra into .venv and runs
# tests/ray (a killed worker; the multi-machine guide's `ray_train.py`, relaunched on another worker count).
test-ray: $(STAMP)
	$(PY) -m pip install -q -c $(TORCH_PIN) -e ".[ray]"
	LIGHTNING_SHARD_TEST_RAY=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -rs tests/ray

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_index.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_loaders.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_lightning.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_streaming.py

# NOTE: needs a CUDA build of torch (on Linux x86-64, PyPI's torch==2.13.0 is one) and 2 GPUs for every test;
# with fewer, the tests that need more are skipped and listed as such.
gpu-check: $(STAMP)
	$(PY) -c "import sys, torch; n = torch.cuda.device_count(); print(f'torch {torch.__version__}: {n} CUDA device(s)'); sys.exit(0 if n else 'gpu-check needs CUDA devices: this torch build or machine has none')"
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m cuda tests/cuda
