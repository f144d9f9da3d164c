"""`optimizer eval` as a library call: validate everything, then run and record."""

from __future__ import annotations

import functools
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from optimizer.config import Settings
from optimizer.models import validate_model
from optimizer.report import summarize
from optimizer.calibration import judge_status
from optimizer.registry import get_agent, get_grader, judges_of
from optimizer.runner import PlannedTrial, Runner, plan, read_prompt
from optimizer.store import Store, default_url
from optimizer.suites import load_suite
from optimizer.types import RunResult, Suite, Trial


@dataclass
class EvalPlan:
    settings: Settings
    project_root: Path
    suites: list[Suite]
    trials: list[PlannedTrial]


def prepare(settings: Settings, project_root: Path, suite_names: list[str] | None = None,
            task_glob: str | list[str] | None = None) -> EvalPlan:
    """Load and check suites, tasks, graders and models. Writes nothing."""
    suites = [load_suite(name, project_root) for name in (suite_names or settings.suites)]
    planned = plan(suites, trials=settings.trials, task_glob=task_glob)
    for suite in suites:
        read_prompt(get_agent(suite.spec.agent_name), project_root)
    validate_model(settings.agent_model, field="agent_model")
    if judges_used(suites):
        validate_model(settings.judge_model, field="judge_model")
    return EvalPlan(settings=settings, project_root=project_root, suites=suites, trials=planned)


def open_store(settings: Settings, project_root: Path) -> Store:
    state_dir = project_root / settings.state_dir
    return Store(settings.database_url or default_url(state_dir))


def execute(eval_plan: EvalPlan, store: Store, *, prompt_root: Path | None = None,
            on_trial: Callable[[Trial], None] | None = None, kind: str = "eval") -> tuple[RunResult, dict[str, Any]]:
    runner = Runner(eval_plan.settings, store, project_root=eval_plan.project_root, prompt_root=prompt_root,
                    on_trial=on_trial)
    run = runner.run(eval_plan.suites, eval_plan.trials, kind=kind)
    return run, finish(run, store)


def judges_used(suites: list[Suite]) -> list[str]:
    """The LLM judges behind the graders of these suites."""
    return judges_of(task for suite in suites for task in suite.tasks)


def finish(run: RunResult, store: Store) -> dict[str, Any]:
    """Summarize a run (with the calibration status of the judges it used) and mark it finished."""
    summary = summarize(run)
    graders = {result.grader for trial in run.trials for result in trial.grader_results}
    judges = [get_grader(name).judge for name in sorted(graders)]
    model = run.settings.get("judge_model") or ""
    summary["judges"] = judge_status(store, [name for name in judges if name], model) if model else []
    status = "errored" if run.trials and summary["totals"]["errored"] == len(run.trials) else "completed"
    store.finish_run(run.run_id, status, summary)
    return summary


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a file."""
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False, default=str))


def write_text(path: Path, text: str) -> None:
    """Write atomically (a temporary file beside it, then a rename): a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o666 & ~_umask())  # what a plain open() would have given the file
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@functools.cache
def _umask() -> int:
    """The process's umask, read once: reading it means setting it, which is process-wide and so
    not something to do on every write while other threads create files."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
