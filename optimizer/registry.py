"""Registration of agents and graders, the registry of the plugin contract (LLM judges register
in `optimizer.trials.judging`, with `@judge`, in the same modules).

Agents and graders register themselves with the `@agent` and `@grader` decorators; the harness finds the modules that hold them through entry points (groups
`optimizer.agents` and `optimizer.graders` in a package's `pyproject.toml`) and never imports
them by name. Each entry records its name, version and where it came from, so a run record can
say exactly what ran. The built-in agents and graders are registered the same way.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, ValidationError

from optimizer.errors import GraderConfigError, HarnessError, SuiteError

if TYPE_CHECKING:
    from optimizer.trials.agent_run import AgentContext, AgentRun
    from optimizer.trials.sim import SimProfile
    from optimizer.types import GraderResult, Task, ToolCallSpec, Trial

AGENT_GROUP = "optimizer.agents"
GRADER_GROUP = "optimizer.graders"


class GraderConfig(BaseModel):
    """Base of a grader's config: an unknown key or a value of the wrong type is an error when the
    suite loads, naming the task file and the field."""

    model_config = ConfigDict(extra="forbid", strict=True)


class NoConfig(GraderConfig):
    pass


@dataclass(frozen=True)
class AnswerKey:
    """Marks a grader config field that holds answer-key text: what a trial is graded against
    (`Annotated[list[str], AnswerKey("graded substring", min_length=3)]`). A prompt patch may not
    copy such text (the hard-coding lint, `optimizer.proposal.patch`); the lint finds it through this mark
    and knows no grader by name. The field holds a string, a list of strings, or None."""

    label: str = "answer-key text"
    """How the lint names a copied value (`graded substring '10:30'`)."""
    min_length: int = 1
    """Values shorter than this (stripped) are left out: too common to count as copied."""


@dataclass(frozen=True)
class AgentEntry:
    name: str
    run: Callable[["AgentContext"], "AgentRun"]
    prompt_file: str
    """Path of the system prompt, relative to the project root: the file the optimizer edits."""
    sim_profile: "SimProfile | None" = None
    source: str = ""
    tools: tuple[str, ...] = ()
    """Names of the tools the agent offers its model; when given, a task's reference solution
    may call only these (checked when the suite loads)."""
    outcome: type[BaseModel] | None = None
    """The agent's typed outcome (an `OutcomeModel`), which its graders read."""
    demonstrate: "Callable[[Task], list[ToolCallSpec]] | None" = None
    """The calls a worked example of a task shows (`optimizer.proposal.examples`), when they are
    not its reference calls as written: the path the agent's prompt asks its model to take."""
    replay: "Callable[[Task, list[ToolCallSpec]], list[ToolCallSpec]] | None" = None
    """How a scripted model (`mock/oracle`, `mock/sim`, a test's stub server) makes a script's
    calls in the order the agent asks for them, when that adds calls (the PKM Agent's `keep_note`
    before the note is filed)."""


@dataclass(frozen=True)
class GraderEntry:
    name: str
    func: Callable[["Task", "Trial", Any], "GraderResult"]
    config_model: type[BaseModel]
    version: str
    source: str = ""
    fingerprint: str = field(default="")
    judge: str | None = None
    """The LLM judge the grader asks (its calibration is reported with every run that uses it)."""
    agent: str | None = None
    """The agent whose outcome the grader reads; None for a grader of any agent."""
    from_task: Callable[["Task"], dict[str, Any]] | None = None
    """Config values the task itself supplies (the public format's
    `reference_solution.expected_outcome`) for the keys its grader config leaves out."""

    def task_config(self, task: "Task", config: dict[str, Any]) -> dict[str, Any]:
        """The config as graded: the task's own values under the config's keys, the config winning."""
        return {**self.from_task(task), **config} if self.from_task else config

    def parse_config(self, config: dict[str, Any], *, path: Path | None, where: str) -> BaseModel:
        try:
            return self.config_model.model_validate(config)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = ".".join(str(part) for part in error["loc"])
            field_name = f"{where}.config" + (f".{loc}" if loc else "")
            raise GraderConfigError(f"{error['msg']} (grader {self.name!r})", path=path,
                                    field=field_name,
                                    fix=f"see the config keys of {self.name!r} in the graders docs") from None

    def answer_keys(self, config: dict[str, Any]) -> list[tuple[AnswerKey, str]]:
        """The answer-key texts in a task's config of this grader, with their marks (read from the
        config as written: the lint looks at every value, whatever else the config gets wrong)."""
        found = []
        for name, info in self.config_model.model_fields.items():
            for mark in (item for item in info.metadata if isinstance(item, AnswerKey)):
                value = config.get(name)
                for text in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
                    if isinstance(text, str) and len(text.strip()) >= mark.min_length:
                        found.append((mark, text.strip()))
        return found


_agents: dict[str, AgentEntry] = {}
_graders: dict[str, GraderEntry] = {}
_loaded = False
_load_lock = threading.Lock()


def agent(name: str, *, prompt_file: str, sim_profile: "SimProfile | None" = None, tools: Iterable[str] = (),
          outcome: type[BaseModel] | None = None,
          demonstrate: "Callable[[Task], list[ToolCallSpec]] | None" = None,
          replay: "Callable[[Task, list[ToolCallSpec]], list[ToolCallSpec]] | None" = None):
    """Register an agent: a function `(AgentContext) -> AgentRun`, offering its model `tools`.

    `outcome` is the agent's typed outcome (an `OutcomeModel`): what the run returns is validated
    against it when the run ends, so a missing or mistyped field makes the trial errored (agent
    crashed) instead of reaching the graders. `demonstrate` gives the calls a worked example of a
    task shows, when its reference calls are not the path the agent's prompt teaches; `replay` the
    calls a scripted model makes for a script (`AgentEntry.replay`)."""

    def register(func):
        run = _checked_outcome(func, outcome) if outcome is not None else func
        _agents[name] = AgentEntry(name=name, run=run, prompt_file=prompt_file, sim_profile=sim_profile,
                                   source=_source(func), tools=tuple(tools), outcome=outcome,
                                   demonstrate=demonstrate, replay=replay)
        return func

    return register


def _checked_outcome(func: Callable, outcome: type[BaseModel]) -> Callable:
    from optimizer.types import Outcome

    @functools.wraps(func)
    def run(context):
        result = func(context)
        result.outcome = Outcome(environment_state=outcome.model_validate(result.outcome.environment_state))
        return result

    return run


def grader(name: str | Callable | None = None, *, config: type[BaseModel] | None = None, version: str = "1",
           judge=None, agent: str | None = None, from_task: Callable[["Task"], dict[str, Any]] | None = None):
    """Register a grader: a function `(task, trial, config) -> GraderResult`, named `name` or, by
    default, after the function. Its results carry that name (the grader need not repeat it).

    `config` is a pydantic model (a `GraderConfig`: extra keys forbidden) validated when a suite
    loads, so a bad config fails before any trial runs; mark its answer-key fields with
    `AnswerKey`. A grader that asks an LLM judge names it (`judge`, from `@judge`): the rubric's
    hash joins the grader's fingerprint, so a changed rubric is never mistaken for a stored
    baseline. A grader that reads one agent's outcome names that `agent`; a suite of another
    agent with graders of its own that uses it fails to load (see `optimizer.suites`). `from_task`
    gives config values from the task for keys its config leaves out (see `GraderEntry.from_task`).
    """

    if callable(name):  # a bare `@grader`
        return grader()(name)

    def register(func):
        known = name or func.__name__
        rubric = judge.rubric_hash if judge else ""
        sources = inspect.getsource(func) + (inspect.getsource(from_task) if from_task else "")
        digest = hashlib.sha256(f"{known}:{version}:{rubric}:{sources}".encode()).hexdigest()[:12]

        @functools.wraps(func)
        def graded(task, trial, parsed):
            result = func(task, trial, parsed)
            result.grader = known
            return result

        _graders[known] = GraderEntry(name=known, func=graded, config_model=config or NoConfig,
                                      version=version, source=_source(func), fingerprint=digest,
                                      judge=judge.name if judge else None, agent=agent, from_task=from_task)
        return graded

    return register


def load_plugins() -> None:
    """Import every module declared under our entry-point groups (once per process)."""
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if _loaded:
            return
        for group in (AGENT_GROUP, GRADER_GROUP):
            for point in entry_points(group=group):
                try:
                    point.load()
                except Exception as exc:
                    raise HarnessError(f"entry point {point.name!r} ({point.value}) failed to load: {exc}",
                                       fix="reinstall the project with `pip install -e .`") from exc
        _loaded = True


def get_agent(name: str, *, path: Path | None = None) -> AgentEntry:
    load_plugins()
    if name not in _agents:
        known = ", ".join(sorted(_agents)) or "none"
        raise SuiteError(f"unknown agent {name!r} (registered: {known})", path=path, field="agent_name",
                         fix="use a registered agent name or register yours with @agent")
    return _agents[name]


def get_grader(name: str, *, path: Path | None = None, where: str = "graders") -> GraderEntry:
    load_plugins()
    if name not in _graders:
        known = ", ".join(sorted(_graders))
        raise GraderConfigError(f"unknown grader {name!r} (known: {known})", path=path, field=f"{where}.name",
                                fix="fix the name or register the grader with @grader")
    return _graders[name]


def judges_of(tasks: Iterable["Task"]) -> list[str]:
    """The LLM judges behind the graders of these tasks, sorted."""
    names = {get_grader(spec.name).judge for task in tasks for spec in task.graders}
    return sorted(name for name in names if name)


def agents() -> dict[str, AgentEntry]:
    load_plugins()
    return dict(_agents)


def graders() -> dict[str, GraderEntry]:
    load_plugins()
    return dict(_graders)


def _source(func: Callable) -> str:
    return f"{func.__module__}.{func.__qualname__}"
