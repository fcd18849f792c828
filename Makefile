# The two commands of the README: `make demo` runs the main job, `make test` runs the checks.
# Both create or refresh the virtual environment themselves.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python

.PHONY: demo test lint typecheck unit bench sim clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ringflow demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy --strict src
	$(PY) -m pytest tests

bench: $(STAMP)
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Many simulation seeds (issue 22): make sim SEEDS=1000 [FIRST=0] [SCENARIO=topology|topology-wide|cluster|all]
SEEDS ?= 1000
FIRST ?= 0
SCENARIO ?= all
sim: $(STAMP)
	$(PY) -m tests.sim.run_seeds --seeds $(SEEDS) --first $(FIRST) --scenario $(SCENARIO)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
