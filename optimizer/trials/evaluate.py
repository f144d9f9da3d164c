"""`optimizer eval` as a library call: validate everything, then run and record."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from optimizer.settings.parts import EvalSettings
from optimizer.models import validate_model
from optimizer.reporting.report import summarize
from optimizer.trials.calibration import judge_status
from optimizer.registry import get_agent, get_grader, judges_of
from optimizer.trials.runner import PlannedTrial, Runner, plan, read_prompt
from optimizer.store import Store
from optimizer.suites import load_suites
from optimizer.types import RunResult, Suite, Trial


@dataclass
class EvalPlan:
    settings: EvalSettings
    project_root: Path
    suites: list[Suite]
    trials: list[PlannedTrial]


def prepare(settings: EvalSettings, project_root: Path, suite_names: list[str] | None = None,
            task_glob: str | list[str] | None = None) -> EvalPlan:
    """Load and check suites, tasks, graders and models. Writes nothing."""
    suites = load_suites(suite_names or settings.suites, project_root)
    planned = plan(suites, trials=settings.trials, task_glob=task_glob)
    for suite in suites:
        read_prompt(get_agent(suite.spec.agent_name), project_root)
        _check_simulated(settings.models.agent_model, suite)
    validate_model(settings.models.agent_model, field="agent_model")
    if judges_used(suites):
        validate_model(settings.models.judge_model, field="judge_model")
    return EvalPlan(settings=settings, project_root=project_root, suites=suites, trials=planned)


def _check_simulated(model: str, suite: Suite) -> None:
    """mock/sim plays an agent from the simulation profile it registered; without one every trial
    would error at its first model call, which reads as a model, key or network problem."""
    from optimizer.errors import ConfigError
    from optimizer.models import is_simulator

    entry = get_agent(suite.spec.agent_name)
    if is_simulator(model) and entry.sim_profile is None:
        raise ConfigError(f"agent {entry.name!r} (suite {suite.name!r}) has no simulation profile, so mock/sim "
                          "cannot play it", field="agent_model",
                          fix="use --agent-model mock/oracle (replays reference solutions) or a real model, or "
                              "register the agent with sim_profile=SimProfile(...)")


def execute(eval_plan: EvalPlan, store: Store, *, prompt_root: Path | None = None,
            on_trial: Callable[[Trial], None] | None = None, kind: str = "eval") -> tuple[RunResult, dict[str, Any]]:
    runner = Runner(eval_plan.settings.runner, store, project_root=eval_plan.project_root, prompt_root=prompt_root,
                    on_trial=on_trial)
    run = runner.run(eval_plan.suites, eval_plan.trials, kind=kind)
    return run, finish(run, store)


def judges_used(suites: list[Suite]) -> list[str]:
    """The LLM judges behind the graders of these suites."""
    return judges_of(task for suite in suites for task in suite.tasks)


def non_voting_graders(store: Store, suites: list[Suite], judge_model: str) -> list[str]:
    """Graders whose LLM judge is flagged on `judge_model` (never calibrated there, or below the
    calibration bar): their scores take no part in the gate's decisions."""
    names = {spec.name for suite in suites for task in suite.tasks for spec in task.graders}
    judged = {name: get_grader(name).judge for name in names if get_grader(name).judge}
    if not judged:
        return []
    flagged = {row["judge"] for row in judge_status(store, sorted(set(judged.values())), judge_model)
               if row["flagged"]}
    return sorted(name for name, judge in judged.items() if judge in flagged)


def finish(run: RunResult, store: Store) -> dict[str, Any]:
    """Summarize a run (with the calibration status of the judges it used) and mark it finished."""
    summary = summarize(run)
    graders = {result.grader for trial in run.trials for result in trial.grader_results}
    judges = [get_grader(name).judge for name in sorted(graders)]
    model = run.settings.get("judge_model") or ""
    summary["judges"] = judge_status(store, [name for name in judges if name], model) if model else []
    status = "errored" if run.trials and summary["totals"]["errored"] == len(run.trials) else "completed"
    store.runs.finish(run.run_id, status, summary)
    return summary
