# FleetPilot: `make demo` and `make test` work on a fresh clone; both bootstrap .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup test lint format bench demo soak asyncapi agent-smoke clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,sim]"
	@touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not soak" $(ARGS)

soak: $(STAMP)
	$(BIN)/python -m pytest -q -m soak $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(ARGS)

demo: $(STAMP)
	$(BIN)/fleetpilot demo $(ARGS)

asyncapi: $(STAMP)
	$(BIN)/fleetpilot asyncapi --out asyncapi.json

agent-smoke: $(STAMP)
	$(BIN)/python -m services.decider.agent.smoke $(ARGS)

clean:
	rm -rf $(VENV) bench-results .pytest_cache .mypy_cache .ruff_cache
