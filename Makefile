# FleetPilot: `make demo` and `make test` work on a fresh clone; both bootstrap .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup test lint format bench demo soak asyncapi agent-smoke llm agent-eval clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || echo "first run: creating $(VENV) and installing FleetPilot and its dependencies (a few minutes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) (pip, quiet; pyproject.toml changed or first run)"
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
	$(BIN)/python -m evaluation.agent.smoke $(ARGS)

# a real 0.5B model on this machine: builds llama-server and assembles the model once (cached in .llm/), then serves
llm: $(STAMP)
	nice -n 10 $(BIN)/fleetpilot llm serve $(ARGS)

# the agent evaluation on the stand-in and on the real local model (tens of minutes on two cores)
agent-eval: $(STAMP)
	nice -n 10 $(BIN)/fleetpilot llm serve --install-only
	nice -n 10 $(BIN)/python -m benchmarks.agent_eval --target standin --target local $(ARGS)

clean:
	rm -rf $(VENV) bench-results .pytest_cache .mypy_cache .ruff_cache
