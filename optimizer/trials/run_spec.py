"""What a run is, for reuse: its spec (`optimizer.provenance.RunSpec`) built from the suites, the
runner's settings and the prompts, which a later run must match exactly to reuse its trials."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from optimizer.errors import InputError
from optimizer.files import read_input
from optimizer.provenance import (ModelSpec, RunSpec, TaskSpec, agent_spec, git_state, grader_spec, optimizer_source,
                                  package_versions, tree_hash)
from optimizer.models import answer_variant
from optimizer.registry import AgentEntry, get_agent, get_grader
from optimizer.settings.parts import RunnerSettings
from optimizer.settings.sources import find_project_root
from optimizer.suites import fixture_paths, task_fingerprint
from optimizer.types import Suite

if TYPE_CHECKING:
    from optimizer.trials.runner import PlannedTrial


def read_prompt(entry: AgentEntry, prompt_root: Path) -> str:
    path = prompt_root / entry.prompt_file
    if not path.is_file():
        raise InputError(f"prompt file of agent {entry.name!r} not found", path=path,
                         fix="restore the file or run from the project root")
    return read_input(path, InputError, field=f"prompt file of agent {entry.name!r}")


def fingerprints(suites: list[Suite], settings: RunnerSettings, prompt_root: Path,
                 planned: list[PlannedTrial] | None = None) -> dict:
    """What a later run must match to reuse this one's results: the run spec
    (`optimizer.provenance.RunSpec`) as JSON. The project (its commit, its base fixtures) is
    found from the suite folder as the CLI finds it, since a loop's `prompt_root` holds only the
    exported prompts."""
    trials: dict[str, int] = {}
    for item in planned or []:
        key = f"{item.suite.name}/{item.task.id}"
        trials[key] = trials.get(key, 0) + 1
    agents, tasks, graders = {}, {}, {}
    for suite in suites:
        entry = get_agent(suite.spec.agent_name)
        agents[entry.name] = agent_spec(entry, read_prompt(entry, prompt_root))
        project_root = find_project_root(suite.root)
        for task in suite.tasks:
            key = f"{suite.name}/{task.id}"
            tasks[key] = TaskSpec(file=task_fingerprint(task), fixtures=tree_hash(fixture_paths(task, project_root)),
                                  trials=trials.get(key, 0))
            for spec in task.graders:
                if spec.name not in graders:
                    graders[spec.name] = grader_spec(get_grader(spec.name))
    given = settings.models
    models = ModelSpec(agent=given.agent_model, judge=given.judge_model, temperature=given.temperature,
                       seed=given.seed, agent_variant=answer_variant(given.agent_model, settings.sim.sim_noise))
    spec = RunSpec(git=git_state(find_project_root(suites[0].root)) if suites else None, packages=package_versions(),
                   optimizer_source=optimizer_source(), models=models, agents=agents, tasks=tasks, graders=graders,
                   skipped_graders=sorted(settings.skip_graders))
    return spec.model_dump(mode="json")
