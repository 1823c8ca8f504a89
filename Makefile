# FleetPilot: `make demo` and `make test` work on a fresh clone; both bootstrap .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
# Hash-locked requirements, written by `make lock` from pyproject.toml: dev (tests, demo, simulators) for the
# venv, sim for compose's image (its demo runs the simulators), prod for the production image
DEV_LOCK := requirements/dev.lock
SIM_LOCK := requirements/sim.lock
PROD_LOCK := requirements/prod.lock
BUILD_REQUIREMENTS := requirements/build.in
CI_TOOLS_LOCK := requirements/ci-tools.lock
UV_COMPILE := $(BIN)/uv pip compile --quiet --generate-hashes --universal --python-version 3.11
# e.g. LOCK_ARGS="--upgrade-package httpx"; without it every version already locked is kept
LOCK_ARGS ?=

.PHONY: setup lock test lint format bench demo soak asyncapi agent-smoke llm agent-eval clean

# pip refuses any file whose sha256 is not in the lock; FleetPilot itself goes in without dependencies (the lock
# holds them all) and without build isolation (the build backend is the locked setuptools, not a fresh download)
$(STAMP): pyproject.toml $(DEV_LOCK)
	@test -x $(BIN)/python || echo "first run: creating $(VENV) and installing FleetPilot and its dependencies (a few minutes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing $(DEV_LOCK) into $(VENV) (pip, quiet; the lock or pyproject.toml changed, or first run)"
	$(BIN)/python -m pip install --quiet --require-hashes -r $(DEV_LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

setup: $(STAMP)

# Re-resolves the locks after pyproject.toml changed: dev first (the versions it already holds are kept), then
# sim and prod constrained to dev's versions, so the image runs what the tests ran; and .ci/run's own tools
lock: $(STAMP)
	$(UV_COMPILE) $(LOCK_ARGS) pyproject.toml $(BUILD_REQUIREMENTS) --extra dev --extra sim -o $(DEV_LOCK)
	$(UV_COMPILE) $(LOCK_ARGS) pyproject.toml $(BUILD_REQUIREMENTS) --extra sim -c $(DEV_LOCK) -o $(SIM_LOCK)
	$(UV_COMPILE) $(LOCK_ARGS) pyproject.toml $(BUILD_REQUIREMENTS) -c $(DEV_LOCK) -o $(PROD_LOCK)
	$(UV_COMPILE) $(LOCK_ARGS) requirements/ci-tools.in -o $(CI_TOOLS_LOCK)

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
