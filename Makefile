# Two commands set everything up on a fresh machine:
#   make demo   runs the main job
#   make test   runs the test suite
# Each creates .venv when it is missing. Override the torch build with
#   make test TORCH_SPEC='torch==2.5.1'   (or any pip requirement; the default is the CPU wheel)
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.posenc-installed

.PHONY: demo test test-slow lint imports typecheck clean

# pytest exits 5 when it collects nothing: a run that tests nothing fails, and says why.
NO_TESTS = { status=$$?; [ $$status -ne 5 ] || echo "pytest collected no test (exit 5)" >&2; exit $$status; }

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/posenc demo --out out/demo

# worksteal: the default 'load' hands out tests in chunks and left one worker idle at the end
# (make test 290 s against 263 s on 2 cores, the same suite).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist worksteal || $(NO_TESTS)

# The tests marked slow (compiled FlexAttention and inductor traces, SIGKILL resume, the float64
# backend grid beyond one factor): about 3 min on 2 cores.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -n 2 --dist worksteal || $(NO_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples tools
	$(BIN)/ruff format --check src tests benchmarks examples tools

# The layering contracts of pyproject.toml's [tool.importlinter] (import-linter).
imports: $(STAMP)
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) out
