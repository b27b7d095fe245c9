# make demo / make test on a fresh machine: each sets up .venv (only when missing or out of
# date) from the exact pins in constraints.txt, then runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup demo demo-replay notebook test test-fast lint format bench bench-gateway clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The Spark job on the embedded default with live members (about a minute once installed).
demo: setup
	$(BIN)/coordinator demo

# The demo, then notebooks/offsets_history.ipynb on its warehouse; the executed copy, pictures
# included, goes to docs/ (about two minutes).
notebook: setup
	$(BIN)/coordinator demo --warehouse warehouse/demo
	$(BIN)/python -m coordinator.notebook --warehouse warehouse/demo --output docs/offsets_history.ipynb

# The engine alone, replaying the stories in examples/ (no Spark; instant).
demo-replay: setup
	$(BIN)/coordinator replay --config conf/coordinator.properties --format timeline examples/static-member-restart.jsonl examples/three-members.jsonl examples/member-crash.jsonl

# pytest exits 5 when it collects no test: that is not a failure of the suite. The suite runs on
# two workers (PYTEST_WORKERS=0: one process), a test file each at a time, the longest files first
# (tests/conftest.py).
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

test-fast: setup
	$(BIN)/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then exit 0; fi; exit $$rc

lint: setup
	$(BIN)/ruff check coordinator tests jobs
	$(BIN)/ruff format --check coordinator tests jobs
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format coordinator tests
	$(BIN)/ruff check --fix coordinator tests

bench: setup
	$(BIN)/coordinator bench engine

# Our gateway against Tansu and noida-db (10 and 100 consumers; a few minutes): the bench extra
# brings confluent-kafka and the peers' binaries.
bench-gateway: setup
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/coordinator bench gateway $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
