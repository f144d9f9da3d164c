"""Trials spread over forked worker processes (`processes`): same results, one store, one ledger."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

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


def test_an_exception_that_stops_a_worker_stops_the_run_and_leaves_no_worker(tmp_path, monkeypatch):
    execute = Runner._execute

    def interrupted(self, run_id, item, system_prompt):
        if item.task.id == "card_event_standup_zoom":
            raise KeyboardInterrupt
        return execute(self, run_id, item, system_prompt)

    monkeypatch.setattr(Runner, "_execute", interrupted)
    store = Store(default_url(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        run(card_plan(2), store)
    assert multiprocessing.active_children() == []
    store.close()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_workers_of_a_killed_parent_exit_at_their_next_trial(tmp_path):
    script = ("import sys; from pathlib import Path; from optimizer.config import Settings; "
              "from optimizer.evaluate import prepare, execute; from optimizer.store import Store, default_url; "
              "plan = prepare(Settings(agent_model='mock/oracle@100ms', trials=100, concurrency=4, processes=2), "
              f"Path({str(PROJECT_ROOT)!r}), ['card_agent']); "
              f"execute(plan, Store(default_url(Path({str(tmp_path)!r}))))")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=PROJECT_ROOT)
    deadline = time.monotonic() + 60
    while len(workers := _children(parent.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(workers) == 2, "the run should have forked two workers"
    time.sleep(0.5)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 15
    while any(map(_running, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_running, workers)), "a worker outlived its parent"


def test_objects_from_before_a_run_are_left_alone_by_the_collector_during_it_and_collected_after():
    import gc
    import weakref

    from optimizer.runner import settled_heap

    class Node:
        pass

    garbage = Node()
    garbage.itself = garbage
    alive = weakref.ref(garbage)
    del garbage
    with settled_heap():
        gc.collect()
        assert alive() is not None, "a full collection during the run walked the older objects"
    gc.collect()
    assert alive() is None, "the older objects must be collectable again after the run"
