# The two commands of the README: `make demo` runs the main job, `make test` runs the checks.
# Both create or refresh the virtual environment themselves.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python

.PHONY: demo test test-long test-all lint typecheck unit bench sim fuzz fuzz-replay clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ringflow demo

# Three pytest workers on the two cores, each test file on one of them (its module fixtures:
# clusters, Spark): much of the suite waits on real processes. Measured on a fresh clone
# (2026-11-28): 2 workers 19:28 of pytest, 3 workers 16:46 (user + sys 18.0 min of CPU in 17.7
# min: the cores were still idle half the time). The end-to-end stories marked `long` (a minute or
# more each, their capability also covered by a shorter test in the suite) run with
# `make test-long`; `make test-all` runs everything.
test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench fuzz
	$(VENV)/bin/ruff format --check src tests bench fuzz
	$(VENV)/bin/mypy --strict src
	$(PY) -m pytest -n 3 --dist loadfile -m "not long" tests

test-long: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -m long tests

test-all: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile tests

bench: $(STAMP)
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Many simulation seeds (issue 22): make sim SEEDS=1000 [FIRST=0] [SCENARIO=topology|topology-wide|cluster|cql|repair|all]
SEEDS ?= 1000
FIRST ?= 0
SCENARIO ?= all
sim: $(STAMP)
	$(PY) -m tests.sim.run_seeds --seeds $(SEEDS) --first $(FIRST) --scenario $(SCENARIO)

# Fuzzers against real node processes (issue 16): make fuzz N=1000000 [TARGET=all] [SEED=0];
# failing inputs go to fuzz/crashes/, make fuzz-replay FILE=fuzz/crashes/<target>-<hash>.bin
N ?= 1000
TARGET ?= all
SEED ?= 0
fuzz: $(STAMP)
	$(PY) -m fuzz run $(TARGET) -n $(N) --seed $(SEED)

fuzz-replay: $(STAMP)
	$(PY) -m fuzz replay $(FILE)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
