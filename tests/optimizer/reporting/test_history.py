"""`optimizer history` on a hand-built store (tests/store_rows.py): the tables' rows, a fully
errored run, the costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from optimizer.reporting.history import load_history
from optimizer.store import Store, default_url
from tests.store_rows import add_iteration, add_run, ledger_entry


def test_a_fully_errored_run_keeps_its_column_of_missing_scores(cli, isolated, tmp_path):
    store = Store(default_url(isolated))
    add_run(store, "run-000001", "eval", {"trivial_input": 0.5, "fact_preservation": 0.75}, 0)
    add_run(store, "run-000002", "eval", {"trivial_input": None, "fact_preservation": None}, 1, status="errored")
    store.close()
    code, out, err = cli("history", "--json", str(tmp_path / "history.json"))
    assert code == 0, out + err
    scores = json.loads((tmp_path / "history.json").read_text())["bucket_scores"]
    assert scores == [{"bucket": "card_agent/fact_preservation", "eval 000001": 0.75, "eval 000002": None},
                      {"bucket": "card_agent/trivial_input", "eval 000001": 0.5, "eval 000002": None}]
    assert "eval 000002" in out


def test_costs_are_summed_per_iteration_and_per_role(tmp_path):
    store = Store(default_url(tmp_path))
    add_iteration(store, "it-1", add_run(store, "run-000001", "baseline", {"trivial_input": 0.5}, 0),
                  ["card_agent/trivial_input"], "rejected", [{"status": "rejected_gate"}])
    for entry in (ledger_entry("agent", "it-1", 0.25, 100), ledger_entry("patcher", "it-1", 1.0, 50),
                  ledger_entry("agent", None, 0.5, 10), ledger_entry("embedder", "it-1", 2.0, 1)):
        store.ledger.record(entry)
    history = load_history(store)
    [iteration] = history.iterations
    assert (iteration["agent_usd"], iteration["patcher_usd"], iteration["judge_usd"]) == (0.25, 1.0, 0.0)
    assert (iteration["cost_usd"], iteration["tokens"], iteration["calls"]) == (3.25, 151, 3)
    assert iteration["proposals"] == 1 and iteration["decision"] == "rejected_gate"
    assert history.cost_by_role == [{"all": "all", "agent_usd": 0.75, "judge_usd": 0.0, "patcher_usd": 1.0,
                                     "cost_usd": 3.75, "tokens": 161, "calls": 4}]
    assert [run["run_id"] for run in history.runs] == ["run-000001"]


def test_only_the_latest_runs_are_listed_oldest_first(tmp_path):
    store = Store(default_url(tmp_path))
    for minute in range(5):
        add_run(store, f"run-00000{minute}", "eval", {"trivial_input": minute / 4}, minute)
    history = load_history(store, limit=2)
    assert [run["run_id"] for run in history.runs] == ["run-000003", "run-000004"]
    assert history.bucket_scores == [{"bucket": "card_agent/trivial_input", "eval 000003": 0.75, "eval 000004": 1.0}]
    assert history.nightlies == [] and history.cost_by_role == []


def test_history_starts_without_what_it_does_not_read(isolated, tmp_path):
    """`optimizer history` only reads the store: it imports no plugin, no judge, no model client
    (neither ours nor a library), no trial data types, no data-frame or numeric library and no
    engine, and for a SQLite store it reads as it is neither SQLAlchemy nor the settings models
    (`optimizer.settings.config`): only where the store is (docs/cli.md gives its start-up time)."""
    store = Store(default_url(isolated))
    add_run(store, "run-000001", "eval", {"trivial_input": 0.5}, 0)
    store.close()
    env = {key: value for key, value in os.environ.items() if not key.endswith("_MODEL")}
    code = textwrap.dedent("""
        import json, sys
        from optimizer.cli import main
        sys.argv = ["optimizer", "history"]
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, exc.code
        heavy = ("prompt_optimizer_agents", "prompt_optimizer_graders", "litellm", "pandas", "dspy",
                 "optimizer.trials.judging", "optimizer.registry", "optimizer.engines.llamacpp.server",
                 "optimizer.engines.llamacpp.served", "rich.progress", "yaml", "optimizer.types",
                 "optimizer.models", "optimizer.settings.config", "optimizer.provenance", "numpy", "scipy", "matplotlib",
                 "jinja2", "git", "sqlalchemy")
        print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in heavy or name in heavy)))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "run-000001" in done.stdout
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
