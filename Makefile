# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup run eval validate test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# The main job: evaluate the card suite on the simulated agent.
run: setup
	$(BIN)/optimizer eval --suite card_agent --agent-model mock/sim --trials 2 --json .optimizer/last-eval.json

validate: setup
	$(BIN)/optimizer suites validate

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/harness_overhead.py

clean:
	rm -rf $(VENV) .optimizer
