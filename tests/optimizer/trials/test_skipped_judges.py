"""The loop's trials do not ask the LLM judges that do not vote (`non_voting_judges = skip`): the
verdicts and values the gate reads are the same as when they are asked and left out."""

from __future__ import annotations

from dataclasses import replace
import sqlite3

import pytest

from optimizer.registry import get_grader
from optimizer.scoring import voting_passed, voting_value
from optimizer.settings.config import Settings
from optimizer.store import Store
from optimizer.suites import load_suite
from optimizer.trials.evaluate import non_voting_graders
from optimizer.trials.run_spec import fingerprints
from optimizer.trials.runner import Runner, graded, plan
from tests.helpers import PROJECT_ROOT, project_repo


def judge_graders(suite) -> frozenset[str]:
    return frozenset(spec.name for task in suite.tasks for spec in task.graders if get_grader(spec.name).judge)


def test_skipped_judges_leave_the_gates_verdicts_and_values_as_leaving_them_out_does(tmp_path):
    suite = load_suite("pkm_agent", PROJECT_ROOT)
    judges = judge_graders(suite)
    store = Store(f"sqlite:///{tmp_path}/s.db")
    assert sorted(judges) == non_voting_graders(store, [suite], "mock/sim")  # never calibrated on mock/sim
    settings = Settings(agent_model="mock/sim", judge_model="mock/sim", concurrency=4).runner
    planned = plan([suite], trials=2)
    asked = Runner(settings, store, project_root=PROJECT_ROOT, in_process=True).run([suite], planned).trials
    skipping = Runner(replace(settings, skip_graders=judges), store,
                      project_root=PROJECT_ROOT, in_process=True).run([suite], planned).trials
    key = lambda trial: (trial.task_id, trial.index)  # noqa: E731
    asked, skipping = sorted(asked, key=key), sorted(skipping, key=key)
    assert [key(trial) for trial in asked] == [key(trial) for trial in skipping]
    judged = 0
    for with_judges, without in zip(asked, skipping):
        names = {result.grader for result in without.grader_results}
        assert names and not names & judges, without.task_id
        judged += bool({result.grader for result in with_judges.grader_results} & judges)
        assert voting_passed(without) == voting_passed(with_judges, judges)
        assert voting_value(without) == voting_value(with_judges, judges)
    assert judged >= len(asked) // 2  # most PKM tasks have a judge: the comparison above is not empty


def test_a_task_only_skipped_graders_score_is_graded_by_them():
    suite = load_suite("pkm_agent", PROJECT_ROOT)
    task = next(task for task in suite.tasks if any(get_grader(spec.name).judge for spec in task.graders))
    names = [spec.name for spec in task.graders]
    assert graded(task, frozenset(names)) == list(range(len(names)))  # never left ungraded (it stays unjudged)
    assert graded(task, frozenset()) == list(range(len(names)))
    judges = frozenset(name for name in names if get_grader(name).judge)
    assert [names[index] for index in graded(task, judges)] == [name for name in names if name not in judges]


def test_a_run_that_skips_judges_is_not_reused_by_one_that_asks_them():
    suite = load_suite("pkm_agent", PROJECT_ROOT)
    settings = Settings(agent_model="mock/sim", judge_model="mock/sim").runner
    asking = fingerprints([suite], settings, PROJECT_ROOT)
    skipping = fingerprints([suite], replace(settings, skip_graders=judge_graders(suite)), PROJECT_ROOT)
    assert asking["skipped_graders"] == [] and skipping["skipped_graders"] == sorted(judge_graders(suite))
    assert {k: v for k, v in asking.items() if k != "skipped_graders"} == \
        {k: v for k, v in skipping.items() if k != "skipped_graders"}


@pytest.mark.parametrize("setting, asked", [("skip", False), ("run", True)])
def test_the_loops_trials_ask_the_judges_that_do_not_vote_only_when_told_to(cli, isolated, tmp_path, monkeypatch,
                                                                              setting, asked):
    settings = f'[tool.optimizer]\nconcurrency = 8\nnon_voting_judges = "{setting}"\n'
    root = project_repo(tmp_path / "repo", {"pyproject.toml": settings}, suite="pkm_agent")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(root))
    code, out, err = cli("run", "--suite", "pkm_agent", "--trials", "1", "--dry-run")
    assert code == 0, out + err
    judges = judge_graders(load_suite("pkm_agent", PROJECT_ROOT))
    with sqlite3.connect(isolated / "optimizer.db") as db:
        names = {name for (name,) in db.execute("SELECT grader FROM grader_results")}
        assert db.execute("SELECT count(*) FROM trials").fetchone()[0] >= 32
    assert bool(names & judges) is asked, names
