"""Finding and loading suites: suite.json plus every task file under tasks/, validated whole.

Everything that can be checked before a trial runs is checked here (types, unknown keys,
duplicate ids, fixtures, agent and grader names, grader configs), so a bad suite fails with one
clear message and nothing is written anywhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
from pathlib import Path
from typing import Iterator, TypeVar

from pydantic import BaseModel, ValidationError

from optimizer.errors import GraderConfigError, SuiteError, TaskFileError
from optimizer.files import parse_json, read_input
from optimizer.registry import get_agent, get_grader, graders
from optimizer.types import Suite, SuiteSpec, Task

M = TypeVar("M", bound=BaseModel)
_NOT_PLAIN = re.compile(r"[/\\\x00-\x1f\x7f]")


def resolve_suite_dir(name_or_path: str, project_root: Path) -> Path:
    """A suite name under `<root>/suites/`, or a path to any folder holding suite.json."""
    candidates = [Path(name_or_path).expanduser(), project_root / "suites" / name_or_path]
    for candidate in candidates:
        if (candidate / "suite.json").is_file():
            return candidate.resolve()
    known = sorted(p.parent.name for p in (project_root / "suites").glob("*/suite.json"))
    raise SuiteError(f"no suite {name_or_path!r} (no suite.json there)", field="--suite",
                     fix=f"use a suite name ({', '.join(known) or 'none found'}) or a path to a suite folder")


SEALED_SPLIT = "test"
"""The split no part of the loop reads (docs/benchmarks.md#transfer-to-notes-nobody-tuned-to):
its suites live under `sealed/`, and a suite holding such a task loads only inside
`reading_sealed()`, which `benchmarks/transfer.py` alone enters."""
_sealed_open: contextvars.ContextVar[bool] = contextvars.ContextVar("sealed_open", default=False)


@contextlib.contextmanager
def reading_sealed() -> Iterator[None]:
    """Let suites of the sealed test split load (for `benchmarks/transfer.py`)."""
    token = _sealed_open.set(True)
    try:
        yield
    finally:
        _sealed_open.reset(token)


def load_suite(name_or_path: str, project_root: Path) -> Suite:
    root = resolve_suite_dir(name_or_path, project_root)
    spec = _parse(SuiteSpec, root / "suite.json", SuiteError)
    agent = get_agent(spec.agent_name, path=root / "suite.json")
    task_files = _task_files(root)
    if not task_files:
        raise SuiteError("the suite has no task files", path=root / "tasks",
                         fix="add tasks/<id>.json or tasks/<group>/<task>/task.json files")
    tasks: list[Task] = []
    seen: dict[str, Path] = {}
    for path, text in task_files.items():
        task = _parse(Task, path, TaskFileError, text)
        if task.id in seen:
            raise TaskFileError(f"duplicate task id {task.id!r} (also in {seen[task.id]})", path=path, field="id",
                                fix="give every task in a suite its own id")
        seen[task.id] = path
        _check_input(task, path)
        _check_fixtures(task, path, root, project_root)
        _check_graders(task, path, spec.agent_name)
        _check_reference_tools(task, path, agent)
        _check_bucket(task, path)
        if task.split == SEALED_SPLIT and not _sealed_open.get():
            raise TaskFileError(f"task {task.id!r} is in the sealed test split, which no part of the loop reads",
                                path=path, field="metadata.split",
                                fix="measure it with benchmarks/transfer.py; a task the loop may read is "
                                    "split train or holdout")
        task._path = path
        task._suite_root = root
        tasks.append(task)
    return Suite(spec=spec, root=root, tasks=tasks)


def load_suites(names: list[str], project_root: Path) -> list[Suite]:
    """The suites named (names or paths), each once. A suite named twice is loaded once; two
    folders whose suite.json carry the same name are an error, since results are kept by name."""
    suites: list[Suite] = []
    for name in names:
        suite = load_suite(name, project_root)
        same = next((other for other in suites if other.name == suite.name), None)
        if same is None:
            suites.append(suite)
        elif same.root != suite.root:
            raise SuiteError(f"two suites are named {suite.name!r}: {same.root} and {suite.root}",
                             path=suite.root / "suite.json", field="name",
                             fix="give each suite its own name in its suite.json, or pass only one of them")
    return suites


def _task_files(root: Path) -> dict[Path, str | None]:
    """Every `*.json` under `tasks/`, sorted, with its text (None when it cannot be read: `_parse`
    reports that), except what lies inside a folder some task names as its `fixture_dir` (a
    workspace may hold JSON files of its own). A name that is not a file (a dangling link, a
    folder called `x.json`) is an error, not a task quietly left out."""
    texts = {path: _text_or_none(path) for path in sorted((root / "tasks").rglob("*.json"))}
    fixtures = {folder for path, text in texts.items() if (folder := _declared_fixture(path, text, root))}
    found = {}
    for path, text in texts.items():
        resolved = path.resolve()
        if any(resolved.is_relative_to(folder) for folder in fixtures):
            continue
        if not path.is_file():
            raise TaskFileError("cannot read: not a file (a folder, or a link to nothing)", path=path,
                                fix="remove it or point it at a task file")
        found[path] = text
    return found


def _text_or_none(path: Path) -> str | None:
    try:
        return read_input(path, TaskFileError)
    except TaskFileError:
        return None


def _declared_fixture(path: Path, text: str | None, root: Path) -> Path | None:
    """The fixture folder a task file names, found without validating the file (that comes later)."""
    try:
        data = parse_json(text, path, TaskFileError) if text is not None else None
    except TaskFileError:
        return None
    folder = data.get("input", {}).get("fixture_dir") if isinstance(data, dict) and isinstance(
        data.get("input"), dict) else None
    if not isinstance(folder, str) or not folder:
        return None
    folder = (root / folder).resolve()
    # only a folder inside the suite that does not hold the task itself (a bad fixture_dir is
    # reported when the task is checked, which needs the task file kept)
    inside = folder.is_relative_to(root.resolve()) and not path.resolve().is_relative_to(folder)
    return folder if inside else None


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


def _check_input(task: Task, path: Path) -> None:
    """A task states its note: without `input.content` it would run as an empty note, which a
    task means only when it says `"content": ""`."""
    for field, given in (("input", "input" in task.model_fields_set),
                         ("input.content", "content" in task.input.model_fields_set)):
        if not given:
            raise TaskFileError("required, but missing: without it the task runs as an empty note", path=path,
                                field=field, fix='add "input": {"content": "<the note>"} ("" for a task that means '
                                                 f"an empty note); {FORMAT_HELP}")


def _check_bucket(task: Task, path: Path) -> None:
    """A task names its failure bucket: the loop targets, gates and reports by bucket, and a task
    without one would be pooled with every other such task under "unbucketed"."""
    bucket = task.metadata.get("failure_bucket", "")
    if not bucket.strip():
        raise TaskFileError("required, but missing: every task belongs to a failure bucket", path=path,
                            field="metadata.failure_bucket",
                            fix='add "metadata": {"failure_bucket": "<the kind of failure this task catches>"}; '
                                f"{FORMAT_HELP}")
    if not plain_name(bucket):
        raise TaskFileError(f"{bucket!r} is not a plain name: a bucket names a folder of the regression suite",
                            path=path, field="metadata.failure_bucket",
                            fix="use a name without /, \\ or control characters, such as template_quote")


def plain_name(name: str) -> bool:
    """Whether `name` can be one folder's name: no separator or control character, not `.` or `..`."""
    return bool(name.strip()) and name not in (".", "..") and not _NOT_PLAIN.search(name)


def _check_fixtures(task: Task, path: Path, suite_root: Path, project_root: Path) -> None:
    if task.input.base_fixture:
        if not plain_name(task.input.base_fixture):
            raise TaskFileError(f"base fixture {task.input.base_fixture!r} is not a folder name", path=path,
                                field="input.base_fixture",
                                fix=f"name a folder of {suite_root} or of {project_root / 'fixtures'}, without "
                                    "a path (use fixture_dir for a folder inside the suite)")
        found = _find_base_fixture(task.input.base_fixture, suite_root, project_root)
        if not found.is_dir():
            raise TaskFileError(f"base fixture {task.input.base_fixture!r} not found in {suite_root} "
                                f"or {project_root / 'fixtures'}", path=path, field="input.base_fixture",
                                fix="create the fixture folder or fix the name")
        allowed = (suite_root.resolve(), (project_root / "fixtures").resolve())
        if not any(found.resolve().is_relative_to(folder) for folder in allowed):
            raise TaskFileError(f"base fixture {task.input.base_fixture!r} is a link to {found.resolve()}, outside "
                                f"the suite and the project's fixtures", path=path, field="input.base_fixture",
                                fix="copy the fixture into the project instead of linking to it")
    if task.input.fixture_dir:
        folder = (suite_root / task.input.fixture_dir).resolve()
        if not folder.is_relative_to(suite_root):
            raise TaskFileError(f"fixture folder {task.input.fixture_dir!r} is outside the suite folder {suite_root}",
                                path=path, field="input.fixture_dir",
                                fix="keep fixtures inside the suite and give the path relative to the suite root")
        if not folder.is_dir():
            raise TaskFileError(f"fixture folder {task.input.fixture_dir!r} not found under {suite_root}",
                                path=path, field="input.fixture_dir",
                                fix="give a folder path relative to the suite root")


def _check_graders(task: Task, path: Path, agent_name: str) -> None:
    for index, spec in enumerate(task.graders):
        where = f"graders[{index}]"
        entry = get_grader(spec.name, path=path, where=where)
        if entry.agent and entry.agent != agent_name and _owns_graders(agent_name):
            raise GraderConfigError(f"grader {spec.name!r} grades the {entry.agent}, and this suite runs the "
                                    f"{agent_name}", path=path, field=f"{where}.name",
                                    fix=f"use a grader of the {agent_name}, or move the task to a suite of the "
                                        f"{entry.agent}")
        entry.parse_config(entry.task_config(task, spec.config), path=path, where=where)


def _check_reference_tools(task: Task, path: Path, agent) -> None:
    """A reference solution calls only tools the agent offers (when the agent names them)."""
    if not agent.tools or task.reference_solution is None:
        return
    for index, call in enumerate(task.reference_solution.tool_calls):
        if call.name not in agent.tools:
            raise TaskFileError(f"the {agent.name} has no tool {call.name!r}", path=path,
                                field=f"reference_solution.tool_calls[{index}].name",
                                fix=f"use one of: {', '.join(agent.tools)}")


def _owns_graders(agent_name: str) -> bool:
    """Whether some grader is declared as this agent's. A suite of such an agent (card_agent,
    pkm_agent) may not use another agent's graders: they read an outcome this agent does not
    produce. An agent with no graders of its own (a plugin variant of the card agent, say) may
    use any grader."""
    return any(entry.agent == agent_name for entry in graders().values())


def _parse(model: type[M], path: Path, error: type[SuiteError] | type[TaskFileError], text: str | None = None) -> M:
    """`path` validated as `model`; `text` is its content when already read."""
    text = read_input(path, error) if text is None else text
    parse_json(text, path, error)  # its syntax and depth first: pydantic's own message for either is obscure
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        problems = [_problem(item) for item in exc.errors()]
        (field, message, fix), others = problems[0], problems[1:]
        if others:  # every problem at once: one fix-and-rerun, not one per problem
            message += "".join(f"\n  also field '{other}': {text}" for other, text, _ in others)
        raise error(message, path=path, field=field, fix=fix) from None


FORMAT_HELP = "see 'Suites and tasks' in the README for the format"


def _problem(item: dict) -> tuple[str, str, str]:
    """(field, message, fix) of one pydantic error, the field written as `graders[0].config`."""
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"]).lstrip(".")
    message = item["msg"].removeprefix("Value error, ")
    if item["type"] == "extra_forbidden":
        return field or "(top level)", "unknown key", "remove the key"
    if item["type"] == "missing":
        return field or "(top level)", "required, but missing", f"add it; {FORMAT_HELP}"
    return field or "(top level)", message, f"correct the value; {FORMAT_HELP}"


def project_suites(project_root: Path) -> list[tuple[str, dict]]:
    """Every suite folder under `<root>/suites/`, sorted, with its raw suite.json ({} when it cannot
    be read: such a suite fails with a proper message when it is loaded by name)."""
    found = []
    for path in sorted((project_root / "suites").glob("*/suite.json")):
        try:
            data = parse_json(read_input(path, SuiteError), path, SuiteError)
        except SuiteError:
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
