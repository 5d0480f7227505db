# Quick start: `make demo` (the TUI on a bundled faulty workload) and `make test`.
# Both create .venv on first use. An installed torch (your CUDA build) is reused when the
# interpreter already has one; otherwise torch==2.13.0 is installed, before the project's extras,
# so that pip never resolves a bare `torch` requirement itself (which could fetch a CUDA build).
# fieldguide itself does not need torch: only the demo and the tests do (extras `demo`, `test`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fieldguide-installed

.PHONY: demo demo-headless test test-all test-fast lint screenshots bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test,demo]"
	touch $(STAMP)

# Exit status 1 means "departure found": what the demo is for; 3 (inconclusive) and 130 (quit
# mid-walk) are the user's choice to stop. None of them is a failure of the demo.
demo: $(STAMP)
	$(VENV)/bin/fieldguide demo; s=$$?; [ $$s -le 1 ] || [ $$s -eq 3 ] || [ $$s -eq 130 ]

demo-headless: $(STAMP)
	$(VENV)/bin/fieldguide demo --no-tui; s=$$?; [ $$s -le 1 ] || [ $$s -eq 3 ] || [ $$s -eq 130 ]

# Two lanes (pytest-xdist), one worker a core; tests marked `alone` have the machine to themselves,
# and a zoo walk a neighbour made too close to call is walked again alone (tests/conftest.py).
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" --durations=20 -n 2 --dist loadgroup

test-all: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not integration"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

bench: $(STAMP)
	$(PY) benchmarks/cli_startup.py
	$(PY) benchmarks/overhead.py
