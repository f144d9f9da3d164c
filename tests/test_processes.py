"""Trials spread over forked worker processes (`processes`): same results, one store, one ledger."""

from __future__ import annotations

import json
import os

import pytest

from optimizer.config import Settings
from optimizer.evaluate import prepare
from optimizer.ledger import Budget, BudgetExceeded, Ledger, charging
from optimizer.runner import Runner
from optimizer.store import Store, default_url
from tests.conftest import PROJECT_ROOT


def card_plan(processes: int, **settings):
    values = {"agent_model": "mock/sim", "trials": 2, "concurrency": 8, "processes": processes, **settings}
    return prepare(Settings(**values), PROJECT_ROOT, ["card_agent"])


def run(plan, store: Store):
    runner = Runner(plan.settings, store, project_root=PROJECT_ROOT)
    return runner.run(plan.suites, plan.trials)


def stamp_worker_pid(monkeypatch):
    """Each trial notes the process that ran it (forked workers inherit the patched runner)."""
    execute = Runner._execute

    def stamped(self, run_id, item, system_prompt):
        trial = execute(self, run_id, item, system_prompt)
        trial.outcome.environment_state["pid"] = os.getpid()
        return trial

    monkeypatch.setattr(Runner, "_execute", stamped)


def verdicts(run_result) -> dict:
    return {(t.suite, t.task_id, t.index): (t.status, t.score) for t in run_result.trials}


def test_two_worker_processes_score_every_trial_as_one_process_does_and_share_the_cache(tmp_path, monkeypatch):
    stamp_worker_pid(monkeypatch)
    single = run(card_plan(1), Store(default_url(tmp_path / "one")))
    store = Store(default_url(tmp_path / "two"))
    plan = card_plan(2)
    assert Runner(plan.settings, store, project_root=PROJECT_ROOT).processes(plan.trials, 8) == 2
    spread = run(plan, store)

    assert verdicts(spread) == verdicts(single) and len(verdicts(spread)) == 50
    pids = {trial.outcome.environment_state["pid"] for trial in spread.trials}
    assert len(pids) == 2 and os.getpid() not in pids
    assert {trial.outcome.environment_state["pid"] for trial in single.trials} == {os.getpid()}
    assert len(store.trials_frame(spread.run_id)) == 50
    calls = sum(trial.transcript.usage.calls for trial in spread.trials)
    assert calls > 0 and store.count("response_cache") == calls

    again = run(plan, store)  # the workers read the parent's stored answers
    assert verdicts(again) == verdicts(single)
    assert sum(trial.transcript.usage.calls for trial in again.trials) == 0
    assert sum(trial.transcript.usage.cache_hits for trial in again.trials) == calls
    store.close()


def test_a_worker_that_dies_leaves_its_unfinished_trials_errored_and_the_run_completes(tmp_path, monkeypatch):
    execute = Runner._execute

    def crash_on_one_task(self, run_id, item, system_prompt):
        if item.task.id == "card_event_standup_zoom" and item.index == 1:
            os._exit(7)
        return execute(self, run_id, item, system_prompt)

    monkeypatch.setattr(Runner, "_execute", crash_on_one_task)
    plan = card_plan(2)
    assert any(item.task.id == "card_event_standup_zoom" for item in plan.trials)
    store = Store(default_url(tmp_path))
    result = run(plan, store)

    assert len(result.trials) == 50 and len(store.trials_frame(result.run_id)) == 50
    lost = [trial for trial in result.trials if trial.status == "errored"]
    assert lost and all("ended (exit code 7) before the trial finished" in trial.error for trial in lost)
    assert ("card_agent", "card_event_standup_zoom", 1) in {(t.suite, t.task_id, t.index) for t in lost}
    assert len(lost) <= 25, "the other worker's share is unaffected"
    store.close()


def test_a_budget_holds_across_worker_processes(tmp_path):
    store = Store(default_url(tmp_path))
    budget = 12_000
    ledger = Ledger(store, budget=Budget(tokens=budget))
    with charging(ledger), pytest.raises(BudgetExceeded):
        run(card_plan(2), store)
    store.flush()
    cost, tokens = store.ledger_total()
    assert 0 < ledger.spent_tokens <= budget
    assert tokens == ledger.spent_tokens, "every call the workers made is a row in the parent's ledger"
    store.close()


def test_every_call_of_the_workers_is_recorded_in_the_ledger(tmp_path):
    store = Store(default_url(tmp_path))
    with charging(Ledger(store)):
        result = run(card_plan(2), store)
    calls = sum(trial.transcript.usage.calls for trial in result.trials)
    frame = store.ledger_frame()
    assert calls > 0 and int(frame["calls"].sum()) == calls
    assert set(frame["role"]) == {"agent"}
    store.close()


@pytest.mark.parametrize("agent_model, suite, judge_model, concurrency, expected", [
    ("mock/sim", "card_agent", "mock/sim", 8, 2),
    ("mock/oracle@5ms", "pkm_agent", "mock/sim", 8, 2),
    ("mock/sim", "card_agent", "mock/sim", 1, 1),           # one trial in flight: nothing to share
    ("openai/gpt-4o-mini", "card_agent", "mock/sim", 8, 1),  # a hosted model: its calls are waits
    ("mock/sim", "pkm_agent", "local/qwen2.5-coder-1.5b", 8, 1),  # the embedded judge lives here
])
def test_only_runs_whose_models_answer_in_process_are_spread(tmp_path, agent_model, suite, judge_model,
                                                                 concurrency, expected):
    settings = Settings(agent_model=agent_model, judge_model=judge_model, concurrency=concurrency, processes=2)
    store = Store(default_url(tmp_path))
    runner = Runner(settings, store, project_root=PROJECT_ROOT)
    from optimizer.suites import load_suite
    from optimizer.runner import plan

    planned = plan([load_suite(suite, PROJECT_ROOT)])
    assert runner.processes(planned, runner.workers(planned)) == expected
    store.close()


def test_eval_takes_processes_from_the_command_line(cli, tmp_path):
    out_json = tmp_path / "out.json"
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/oracle", "--processes", "2",
                         "--json", str(out_json))
    assert code == 0, out + err
    summary = json.loads(out_json.read_text())
    assert summary["settings"]["processes"] == 2
    assert summary["totals"]["passed"] == summary["totals"]["trials"] == 25

    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/oracle", "--processes", "0")
    assert code == 2
    assert "--processes" in out + err
