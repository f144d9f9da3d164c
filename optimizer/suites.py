"""Finding and loading suites: suite.json plus every task file under tasks/, validated whole.

Everything that can be checked before a trial runs is checked here (types, unknown keys,
duplicate ids, fixtures, agent and grader names, grader configs), so a bad suite fails with one
clear message and nothing is written anywhere.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from optimizer.errors import SuiteError, TaskFileError
from optimizer.registry import get_agent, get_grader
from optimizer.types import Suite, SuiteSpec, Task

M = TypeVar("M", bound=BaseModel)


def resolve_suite_dir(name_or_path: str, project_root: Path) -> Path:
    """A suite name under `<root>/suites/`, or a path to any folder holding suite.json."""
    candidates = [Path(name_or_path).expanduser(), project_root / "suites" / name_or_path]
    for candidate in candidates:
        if (candidate / "suite.json").is_file():
            return candidate.resolve()
    known = sorted(p.parent.name for p in (project_root / "suites").glob("*/suite.json"))
    raise SuiteError(f"no suite {name_or_path!r} (no suite.json there)", field="--suite",
                     fix=f"use a suite name ({', '.join(known) or 'none found'}) or a path to a suite folder")


def load_suite(name_or_path: str, project_root: Path) -> Suite:
    root = resolve_suite_dir(name_or_path, project_root)
    spec = _parse(SuiteSpec, root / "suite.json", SuiteError)
    get_agent(spec.agent_name, path=root / "suite.json")
    task_files = sorted(p for p in (root / "tasks").rglob("*.json") if p.is_file())
    if not task_files:
        raise SuiteError("the suite has no task files", path=root / "tasks",
                         fix="add tasks/<id>.json or tasks/<group>/<task>/task.json files")
    tasks: list[Task] = []
    seen: dict[str, Path] = {}
    for path in task_files:
        task = _parse(Task, path, TaskFileError)
        if task.id in seen:
            raise TaskFileError(f"duplicate task id {task.id!r} (also in {seen[task.id]})", path=path, field="id",
                                fix="give every task in a suite its own id")
        seen[task.id] = path
        _check_fixtures(task, path, root, project_root)
        _check_graders(task, path)
        task._path = path
        task._suite_root = root
        tasks.append(task)
    return Suite(spec=spec, root=root, tasks=tasks)


def fixture_paths(task: Task, project_root: Path) -> list[Path]:
    """Folders copied into the trial workspace, in order (base fixture first)."""
    root = task.suite_root
    paths = []
    if task.input.base_fixture:
        paths.append(_find_base_fixture(task.input.base_fixture, root, project_root))
    if task.input.fixture_dir:
        paths.append(root / task.input.fixture_dir)
    return paths


def task_fingerprint(task: Task) -> str:
    return hashlib.sha256(task.path.read_bytes()).hexdigest()[:16] if task.path else ""


def _find_base_fixture(name: str, suite_root: Path, project_root: Path) -> Path:
    for candidate in (suite_root / name, project_root / "fixtures" / name):
        if candidate.is_dir():
            return candidate
    return suite_root / name


def _check_fixtures(task: Task, path: Path, suite_root: Path, project_root: Path) -> None:
    if task.input.base_fixture:
        found = _find_base_fixture(task.input.base_fixture, suite_root, project_root)
        if not found.is_dir():
            raise TaskFileError(f"base fixture {task.input.base_fixture!r} not found in {suite_root} "
                                f"or {project_root / 'fixtures'}", path=path, field="input.base_fixture",
                                fix="create the fixture folder or fix the name")
    if task.input.fixture_dir:
        folder = (suite_root / task.input.fixture_dir).resolve()
        if not folder.is_relative_to(suite_root) or not folder.is_dir():
            raise TaskFileError(f"fixture folder {task.input.fixture_dir!r} not found under {suite_root}",
                                path=path, field="input.fixture_dir",
                                fix="give a folder path relative to the suite root")


def _check_graders(task: Task, path: Path) -> None:
    for index, spec in enumerate(task.graders):
        where = f"graders[{index}]"
        get_grader(spec.name, path=path, where=where).parse_config(spec.config, path=path, where=where)


def _parse(model: type[M], path: Path, error: type[SuiteError] | type[TaskFileError]) -> M:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read: {exc}", path=path) from None
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}", path=path,
                    fix="fix the JSON syntax") from None
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top level)"
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise error(message + more, path=path, field=field,
                    fix="remove the key" if first["type"] == "extra_forbidden" else "correct the value") from None


def project_suites(project_root: Path) -> list[tuple[str, dict]]:
    """Every suite folder under `<root>/suites/`, sorted, with its raw suite.json ({} when it cannot
    be read: such a suite fails with a proper message when it is loaded by name)."""
    found = []
    for path in sorted((project_root / "suites").glob("*/suite.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            data = {}
        found.append((path.parent.name, data if isinstance(data, dict) else {}))
    return found


def with_regression_suites(suites: list[Suite], project_root: Path) -> list[Suite]:
    """`suites` plus every regression suite under `<root>/suites/` for the same agents (graduated
    tasks gate every later change to their agent's prompt, whether or not they were named)."""
    agents = {suite.spec.agent_name for suite in suites}
    names = {suite.name for suite in suites}
    return suites + [load_suite(folder, project_root) for folder, data in project_suites(project_root)
                     if data.get("kind") == "regression" and data.get("agent_name") in agents
                     and data.get("name") not in names]
