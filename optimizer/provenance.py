"""The run spec: everything that shapes a run's results, recorded with the run.

A stored baseline is reused only when a new run's spec is exactly the same (see
`optimizer.trials.run_spec.fingerprints`), so an edit to anything below — the agent's code, texts and tool
schemas, a task or its fixtures, a grader's module or a helper of its package, a rubric or
calibration file, a model parameter, a package version, the commit — makes the gate measure
afresh instead of comparing with a stale baseline.

Code and data files are hashed where the process reads them: an agent's or grader's package where
it is imported from, a task's fixtures where the runner copies them from. A file's hash is kept for
the process and computed again only when its size or modification time changes, so the spec of a
run costs a `stat` per file.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from optimizer.registry import AgentEntry, GraderEntry

PACKAGES = {"litellm": ("litellm",), "dspy": ("dspy", "dspy-ai"), "llama-cpp-python": ("llama-cpp-python",),
            "optimizer": ("prompt-optimizer",)}
"""The packages whose versions shape a run, each with the distribution names it is installed under."""
SKIPPED = {"__pycache__", ".git", ".pytest_cache"}


class Spec(BaseModel):
    """Frozen and strict about keys: a recorded spec reads back as it was written, or not at all."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GitState(Spec):
    commit: str
    dirty: bool
    """Tracked files differ from the commit (untracked files, such as the state folder, do not count)."""
    changes: str | None = None
    """Hash of the uncommitted changes to tracked files, when dirty: two runs of the same dirty
    tree match, two different edits do not."""


class AgentSpec(Spec):
    prompt: str
    """The system prompt the optimizer edits, as the run reads it (the base commit's, in a loop)."""
    code: str
    """The .py files of the agent's package, the modules of its top-level package it shares
    with other agents (e.g. `agents/texts.py`), and the module of its typed outcome
    (`outcomes/card.py`), which it shares with its graders. The tool loop is the optimizer's
    (`optimizer_source`)."""
    texts: str
    """The other files of its prompt folder it reads (`agents/prompts/card_agent.*`)."""
    schemas: str
    """The data files of its package: tool schemas and the simulator's rules."""


class TaskSpec(Spec):
    file: str
    fixtures: str
    """The folders copied into the trial workspace (base fixture, then the task's own)."""
    trials: int
    """Trials planned for the task in this run."""


class GraderSpec(Spec):
    version: str
    module: str
    """The module that defines the grader, helpers in it included."""
    package: str
    """Every module of the grader's top-level package (`graders/`), for helpers it imports."""
    rubric: str | None = None
    calibration: str | None = None


class ModelSpec(Spec):
    agent: str
    judge: str
    temperature: float | None
    seed: int | None
    agent_variant: str | None = None
    """What decides the agent model's answers besides the request (`mock/sim`'s noise mode)."""


class RunSpec(Spec):
    """What a later run must match exactly to reuse this one's results."""

    git: GitState | None
    """The project's commit; None when the suites are not in a git repository."""
    packages: dict[str, str]
    """Installed versions of the packages in `PACKAGES` (absent when not installed)."""
    optimizer_source: str
    """The optimizer's own modules (its installed version does not change with an edit)."""
    models: ModelSpec
    agents: dict[str, AgentSpec]
    tasks: dict[str, TaskSpec]
    """Keyed `suite/task id`."""
    graders: dict[str, GraderSpec]
    skipped_graders: list[str] = []
    """Graders not asked when a task had another (`RunnerSettings.skip_graders`)."""


def file_hash(path: Path) -> str:
    """Hash of a file's bytes; "missing" when it does not exist."""
    try:
        stat = path.stat()
    except OSError:
        return "missing"
    return _hash_bytes(str(path), stat.st_mtime_ns, stat.st_size, stat.st_ino)


def files_hash(paths: Iterable[Path], relative_to: Path | None = None) -> str:
    """One hash over files, each named by its path (relative to `relative_to` when given)."""
    lines = [f"{(path.relative_to(relative_to) if relative_to else path).as_posix()}\0{file_hash(path)}\n"
             for path in sorted(paths)]
    return short_hash("".join(lines).encode())


def tree_files(folder: Path, pattern: str = "*") -> list[Path]:
    """Files under `folder` matching `pattern`, caches and VCS folders left out."""
    if not folder.is_dir():
        return []
    return [path for path in folder.rglob(pattern)
            if path.is_file() and not SKIPPED.intersection(path.relative_to(folder).parts)]


def tree_hash(folders: Iterable[Path]) -> str:
    """One hash over every file of the folders, in order, each named by its place in its folder
    (a missing folder counts as empty)."""
    return combined(*(files_hash(tree_files(folder), folder) for folder in folders))


def module_file(module: str) -> Path:
    """The file `module` was imported from."""
    return Path(sys.modules[module].__file__)


def package_folder(module: str) -> Path | None:
    """The folder of the package holding `module`; None for a top-level module."""
    package = sys.modules[module].__package__ or ""
    if not package:
        return None
    return module_file(package).parent


def package_versions() -> dict[str, str]:
    """Looked up for every spec (a lookup is cheap next to a run)."""
    found = {}
    for name, distributions in PACKAGES.items():
        for distribution in distributions:
            try:
                found[name] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def git_state(folder: Path) -> GitState | None:
    """The commit checked out where `folder` lies, and whether tracked files differ from it."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True)
        except OSError:  # no git installed: no commit to record
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "-q", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no") or ""
    if not status.strip():
        return GitState(commit=commit.strip(), dirty=False)
    diff = git("diff", "--no-color", "--no-ext-diff", "HEAD") or ""
    return GitState(commit=commit.strip(), dirty=True, changes=short_hash(diff.encode()))


@functools.cache
def optimizer_source() -> str:
    """The optimizer's modules and templates (an editable install keeps one version number
    through every edit), hashed at a process's first use: an edit made while the process runs
    is not seen by its later runs (a command is one process; the next one hashes again)."""
    folder = Path(__file__).resolve().parent
    return files_hash(tree_files(folder, "*.py") + tree_files(folder / "templates"), folder)


def agent_spec(entry: "AgentEntry", prompt_text: str) -> AgentSpec:
    """The spec of a registered agent, given the system prompt its run reads."""
    module = entry.run.__module__
    package = package_folder(module)
    top = module_file(module.split(".")[0]).parent if package else module_file(module).parent
    own = tree_files(package) if package else [module_file(module)]
    shared = sorted(top.glob("*.py")) if package else []
    prompt = Path(entry.prompt_file)
    stem = prompt.name.split(".")[0]
    folder = _texts_folder(top, prompt.parent) if package else top / prompt.parent
    texts = [path for path in folder.glob(f"{stem}.*") if path.name != prompt.name]
    outcome = module_file(entry.outcome.__module__) if entry.outcome else None
    return AgentSpec(prompt=short_hash(prompt_text.encode()),
                     code=combined(files_hash([path for path in own if path.suffix == ".py"], package or top),
                                   files_hash(shared, top),
                                   *([files_hash([outcome], outcome.parent)] if outcome else [])),
                     texts=files_hash(texts, folder),
                     schemas=files_hash([path for path in own if path.suffix != ".py"], package or top))


def _texts_folder(top: Path, relative: Path) -> Path:
    """Where the agent's prompt folder (`relative`, from the project root) is read beside its
    code: under the import root (`prompts/` beside a plugin's package), or, for a package installed
    under another name than its folder (`agents/prompts/` in the wheel's `prompt_optimizer_agents`),
    inside the package."""
    if len(relative.parts) > 1 and relative.parts[0] != top.name and (top / Path(*relative.parts[1:])).is_dir():
        return top / Path(*relative.parts[1:])
    return top.parent / relative


def grader_spec(entry: "GraderEntry") -> GraderSpec:
    """The spec of a registered grader."""
    module = entry.func.__module__
    top = module.split(".")[0]
    package = module_file(top).parent if hasattr(sys.modules[top], "__path__") else None
    from optimizer.trials.judging import get_judge  # not at the top: `optimizer history` reads specs without the judges

    judge = get_judge(entry.judge) if entry.judge else None
    return GraderSpec(version=entry.version, module=file_hash(module_file(module)),
                      package=files_hash(tree_files(package, "*.py"), package) if package
                      else file_hash(module_file(module)),
                      rubric=judge.rubric_hash if judge else None,
                      calibration=file_hash(judge.calibration) if judge and judge.calibration else None)


def combined(*hashes: str) -> str:
    """One hash standing for several."""
    return short_hash("\n".join(hashes).encode())


def short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@functools.lru_cache(maxsize=4096)
def _hash_bytes(path: str, mtime_ns: int, size: int, inode: int) -> str:
    return short_hash(Path(path).read_bytes())
