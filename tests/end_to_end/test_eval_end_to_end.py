"""`optimizer eval` and `optimizer suites validate` on the shipped card suite."""

from __future__ import annotations

import json
import subprocess
import sys

from optimizer.settings.config import Settings
from optimizer.trials.evaluate import prepare
from optimizer.trials.runner import Runner
from optimizer.store import Store, default_url
from tests.conftest import PROJECT_ROOT


def test_suites_validate_passes_for_both_suites(cli):
    code, out, err = cli("suites", "validate")
    assert code == 0, out + err
    assert "card_agent: 25 tasks, ok" in out
    assert "pkm_agent: 32 tasks, ok" in out
    assert "57 tasks in 2 suite(s); 57 score 1.0 under mock/oracle" in out


def test_suites_validate_calls_no_model_so_imports_neither_litellm_nor_dspy():
    """Nor pandas: the check builds no table, and these imports are most of a command's start-up."""
    script = ("import sys; from pathlib import Path; from optimizer.validate import validate_suites; "
              f"report = validate_suites(Path({str(PROJECT_ROOT)!r})); "
              "print(sum(entry.count for entry in report), sum(len(entry.failures) for entry in report), "
              "'litellm' in sys.modules, 'dspy' in sys.modules, 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["57", "0", "False", "False", "False"]


def test_the_cli_starts_without_building_the_data_models():
    """`optimizer --help` imports the command modules only; the public API is loaded on first use."""
    script = ("import sys; import optimizer.cli; import optimizer; "
              "print('optimizer.types' in sys.modules, 'pandas' in sys.modules, optimizer.Task.__name__, "
              "callable(optimizer.agent))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "Task", "True"]


def test_an_unused_judge_model_does_not_limit_concurrency(tmp_path):
    """The embedded model serves `local_slots` calls at once; as the (default) judge of a suite
    without judges it must not hold the card suite's trials to that number."""
    store = Store(default_url(tmp_path))
    local = "local/qwen2.5-coder-1.5b"
    card = prepare(Settings(agent_model="mock/sim", judge_model=local, concurrency=6).evaluation, PROJECT_ROOT,
                   ["card_agent"])
    assert Runner(card.settings.runner, store, project_root=PROJECT_ROOT).workers(card.trials) == 6
    pkm = prepare(Settings(agent_model="mock/sim", judge_model="mock/sim", concurrency=6).evaluation, PROJECT_ROOT,
                  ["pkm_agent"])
    judged = Settings(agent_model="mock/sim", judge_model=local, concurrency=6)
    from optimizer.engines import llamacpp as embedded

    assert Runner(judged.runner, store, project_root=PROJECT_ROOT).workers(pkm.trials) == embedded.slots() < 6
    store.close()


def test_eval_writes_json_store_and_a_rerun_is_served_from_the_cache(cli, isolated, tmp_path):
    out_json = tmp_path / "out.json"
    args = ("eval", "--suite", "card_agent", "--agent-model", "mock/sim", "--trials", "2", "--json", str(out_json))
    code, out, err = cli(*args)
    assert code == 0, out + err
    assert "card_agent by bucket" in out
    first = json.loads(out_json.read_text())
    assert first["totals"]["trials"] == 50
    assert first["totals"]["model_calls"] > 0
    assert {row["bucket"] for row in first["buckets"]} >= {"template_event", "fact_preservation"}
    assert len(first["tasks"]) == 25
    assert 0 < first["suites"][0]["mean_score"] < 1, "mock/sim should fail some tasks of the base prompt"

    code, out, err = cli(*args)
    assert code == 0, out + err
    second = json.loads(out_json.read_text())
    assert second["totals"]["model_calls"] == 0
    assert second["totals"]["cache_hits"] == first["totals"]["model_calls"]
    assert second["buckets"] == first["buckets"] or [
        {k: v for k, v in row.items() if k not in ("tokens", "cost_usd")} for row in second["buckets"]] == [
        {k: v for k, v in row.items() if k not in ("tokens", "cost_usd")} for row in first["buckets"]]

    store = Store(default_url(isolated))
    runs = store.runs.frame()
    assert list(runs["status"]) == ["completed", "completed"]
    assert len(store.trials.frame(second["run_id"])) == 50


def test_trials_of_one_task_are_separate_samples(cli, tmp_path):
    out_json = tmp_path / "out.json"
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/sim", "--trials", "4",
                         "--json", str(out_json))
    assert code == 0, out + err
    tasks = json.loads(out_json.read_text())["tasks"]
    assert any(0 < row["passes"] < row["scored"] for row in tasks), "some task should pass only some trials"
    assert any(row["pass_at_k"] == 1 and row["pass_pow_k"] == 0 for row in tasks)


def test_task_glob_selects_tasks(cli, tmp_path):
    out_json = tmp_path / "out.json"
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/oracle", "--task", "*event*",
                         "--json", str(out_json))
    assert code == 0, out + err
    ids = [row["task_id"] for row in json.loads(out_json.read_text())["tasks"]]
    assert ids and all("event" in task_id for task_id in ids)


def test_nested_task_layout_with_fixture_dir_loads_and_runs(cli, tmp_path):
    from tests.helpers import event_task, write_suite

    task = event_task("nested_multi_fact")
    task["input"].update({"fact_id": "2026/05/25.md#ts_2", "fixture_dir": "tasks/day/nested/workspace"})
    task["metadata"]["owner"] = "someone"  # unknown metadata keys load unchanged
    call = task["reference_solution"]["tool_calls"][0]["arguments"]
    call["fact_id"] = "2026/05/25.md#ts_2"
    suite = write_suite(tmp_path / "s", {
        "tasks/day/nested/task.json": task,
        "tasks/day/nested/workspace/Facts/2026/05/25.md": "## ts_1 08:00\nCoffee.\n\n## ts_2 09:00\nStandup 10:30 Zoom.\n",
    })
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "mock/oracle", "--json",
                         str(tmp_path / "o.json"))
    assert code == 0, out + err
    assert json.loads((tmp_path / "o.json").read_text())["totals"]["passed"] == 1


def test_exit_codes_asked_for_reach_the_shell(cli, tmp_path, monkeypatch):
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/sim", "--task", "card_event_*",
                         "--fail-under", "1.0", "--json", str(tmp_path / "sim.json"))
    assert code == 1, out + err
    assert json.loads((tmp_path / "sim.json").read_text())["suites"][0]["mean_score"] < 1.0
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/oracle", "--task", "card_event_*",
                         "--fail-under", "1.0")
    assert code == 0, out + err
    monkeypatch.setenv("OPTIMIZER_MODEL_DIR", str(tmp_path / "no-model"))
    code, out, err = cli("model", "status")
    assert code == 2 and "optimizer model install" in out, out + err


def test_the_eta_is_paced_from_the_first_finished_trial():
    from optimizer.cli._common import TrialProgress

    progress = TrialProgress(10)
    progress.started, progress.first_done, progress.done = 0.0, 6.0, 1  # 6 s of start-up before the first
    assert progress.eta(6.0) is None  # one trial gives no pace yet
    progress.done = 3
    assert progress.eta(8.0) == 7.0  # 2 trials in 2 s since the first: 7 left at 1 s each, not 7 x 8/3 s
    progress.done = 10
    assert progress.eta(20.0) == 0.0
