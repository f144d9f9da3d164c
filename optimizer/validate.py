"""`optimizer suites validate`: every suite loads, and every task scores 1.0 under mock/oracle.

The oracle (agent and judge) is answered in process, not through litellm and dspy: it replays
each task's reference solution, so the check runs the agents' tool loops and every grader but
calls no model. Nothing waits on a model either, so the tasks run one after another: threads
would only contend for the interpreter.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import NamedTuple

from optimizer.settings.config import replay_settings
from optimizer.errors import SuiteError
from optimizer.trials.evaluate import prepare
from optimizer.trials.runner import Runner
from optimizer.store import Store, default_url
from optimizer.suites import project_suites


def suite_names(project_root: Path) -> list[str]:
    return [folder for folder, _ in project_suites(project_root)]


class SuiteReport(NamedTuple):
    name: str
    count: int
    failures: list[str]
    """A line per task that did not score 1.0 replaying its reference solution."""
    unreplayed: list[str]
    """The tasks with no reference solution, which the oracle has nothing to replay for and
    which did not score 1.0 without one: not checked, so not failures either."""


def validate_suites(project_root: Path, names: list[str] | None = None) -> list[SuiteReport]:
    """Per suite: its task count, failures and unreplayed tasks. Loading errors raise before
    anything runs."""
    names = names or suite_names(project_root)
    if not names:
        raise SuiteError("no suites found", path=project_root / "suites", fix="add suites/<name>/suite.json")
    settings = replay_settings(names)
    plan = prepare(settings, project_root, names)
    report = []
    with tempfile.TemporaryDirectory(prefix="optimizer-validate-") as scratch:
        store = Store(default_url(Path(scratch)))
        try:
            runner = Runner(settings.runner, store, project_root=project_root, in_process=True)
            run = runner.run(plan.suites, plan.trials, kind="validate")
        finally:
            store.close()
    for suite in plan.suites:
        failures, unreplayed = [], []
        tasks = {task.id: task for task in suite.tasks}
        for trial in (t for t in run.trials if t.suite == suite.name):
            if trial.status == "passed" and trial.score == 1.0:
                continue
            if tasks[trial.task_id].reference_solution is None:
                unreplayed.append(trial.task_id)
            else:
                failures.append(f"{trial.task_id}: {trial.status}, score {trial.score}: {_reasons(trial)}")
        report.append(SuiteReport(suite.name, len(suite.tasks), failures, unreplayed))
    return report


def _reasons(trial) -> str:
    return trial.error or "; ".join(f"{r.grader}: {r.rationale}" for r in trial.grader_results
                                    if not r.passed or r.score != 1.0)
