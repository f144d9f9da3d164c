"""The import graph's layering, read from the source (every module is parsed, none imported).

* The model layer (`optimizer/models/`) imports nothing above it: outside its own package only
  the foundation modules it stands on, never `agents/` or `graders/`. What the mock models play
  is installed into it from above (`optimizer.models.mock.play`, `TrialContext.sim_profile`).
  Imports inside functions count here: a lazy import upward is still an import upward.
* An engine (`optimizer/engines/`, the embedded llama.cpp model) is a provider of the model layer
  like an outside one: it stands on the model layer and the foundation alone, and nothing of the
  harness imports it but the command that installs it (`optimizer model`). The model layer
  imports no engine: a `local/` model reaches its engine through the `optimizer.providers` entry
  point (tests/optimizer/models/test_providers.py).
* Graders import nothing from the agents they grade, nor agents from graders: both read the
  agent's typed outcome from `outcomes/`, which imports neither.
* The bundled packages are imported by their installed names (`prompt_optimizer_agents` for the
  folder `agents/`, as pyproject maps them), never by their folders' names, which other
  distributions use (`agents` is the OpenAI Agents SDK's).
* The harness (`optimizer/`) names no built-in grader: what it needs from one (the answer-key
  fields the hard-coding lint protects) it reads from the grader's registration.
* Nothing outside `optimizer/cli/` imports it (not even inside a function): the library returns
  text and data, and the command prints them.
* The layers below the loop (the runner, the comparison and the gate, the proposers, the model
  layer, the simulators) are handed their part of the settings (`optimizer.settings.parts`),
  never the whole `optimizer.settings.config.Settings`, and the parts' module stands on nothing.
  Above them too: only the commands (`optimizer/cli/`) and the settings package name `Settings`;
  the loop, the nightly job, eval, validation and review are handed `Settings.parts` or a part.
* The `optimizer` modules import each other without a cycle. Only module-level imports count
  for this check (those run when a module is imported; a function-level import runs later,
  once every module involved has loaded, and one under `if TYPE_CHECKING:` never runs).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from tests.conftest import PROJECT_ROOT as ROOT

IMPORT_NAMES = {folder: name for name, folder in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                ["tool"]["setuptools"]["package-dir"].items() if "." not in name}
"""Folder -> the name it is installed and imported under (top-level packages; the prompt manual,
data installed inside `optimizer`, imports nothing)."""
AGENTS, GRADERS, OUTCOMES = (IMPORT_NAMES[folder] for folder in ("agents", "graders", "outcomes"))
PACKAGES = ("optimizer", "agents", "graders", "outcomes")
FOUNDATION = {"optimizer.errors", "optimizer.types", "optimizer.files", "optimizer.ledger",
              "optimizer.procfs"}
"""The `optimizer` modules below the model layer, which it may import."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = (IMPORT_NAMES.get(parts[0], parts[0]), *parts[1:])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imports(name: str, *, top_level_only: bool = False) -> set[str]:
    """The modules `name` imports (a `from package import submodule` names the submodule)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    nodes = _top_level(tree.body) if top_level_only else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in MODULES else base)
    return found


def _top_level(body: list[ast.stmt]):
    """Statements run when the module is imported: not inside a function or a class's methods,
    nor under `if TYPE_CHECKING:`."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            yield from _top_level(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _top_level(inner)


def _absolute(name: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = name.split(".") if MODULES[name].name == "__init__.py" else name.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_module_graph_was_read():
    assert "optimizer.models.mock" in MODULES and f"{GRADERS}.pkm" in MODULES
    assert "optimizer.models._context" in imports("optimizer.models.mock")


def test_the_model_layer_imports_nothing_above_it():
    upward = {f"{name} -> {target}"
              for name in MODULES if within(name, "optimizer.models")
              for target in imports(name)
              if (within(target, "optimizer") and not within(target, "optimizer.models")
                  and target not in FOUNDATION) or within(target, AGENTS) or within(target, GRADERS)}
    assert not upward, sorted(upward)


def test_the_model_layer_imports_no_engine():
    assert "optimizer.engines.llamacpp" in MODULES and "optimizer.engines.llamacpp.served" in MODULES
    engines = {f"{name} -> {target}" for name in MODULES if within(name, "optimizer.models")
               for target in imports(name) if within(target, "optimizer.engines")}
    assert not engines, sorted(engines)


def test_an_engine_stands_on_the_model_layer_alone():
    """The public hook it registers through is imported from `optimizer` itself."""
    allowed = ("optimizer.models", "optimizer.engines", *FOUNDATION)
    beyond = {f"{name} -> {target}" for name in MODULES if within(name, "optimizer.engines")
              for target in imports(name)
              if within(target, "optimizer") and target != "optimizer"
              and not any(within(target, base) for base in allowed)
              or any(within(target, package) for package in (AGENTS, GRADERS, OUTCOMES))}
    assert not beyond, sorted(beyond)
    assert "optimizer" in imports("optimizer.engines.llamacpp")


def test_only_the_install_command_imports_an_engine():
    importers = {name for name in MODULES if within(name, "optimizer") and not within(name, "optimizer.engines")
                 for target in imports(name) if within(target, "optimizer.engines")}
    assert importers == {"optimizer.cli.model"}, sorted(importers)


def test_graders_import_nothing_from_agents():
    crossing = {f"{name} -> {target}" for name in MODULES if within(name, GRADERS)
                for target in imports(name) if within(target, AGENTS)}
    assert not crossing, sorted(crossing)


def test_agents_and_graders_share_only_the_outcomes():
    crossing = {f"{name} -> {target}" for name in MODULES
                for source, other in ((AGENTS, GRADERS), (OUTCOMES, AGENTS), (OUTCOMES, GRADERS))
                if within(name, source) for target in imports(name) if within(target, other)}
    assert not crossing, sorted(crossing)
    assert f"{OUTCOMES}.pkm" in imports(f"{GRADERS}.pkm") and f"{OUTCOMES}.pkm" in imports(f"{AGENTS}.pkm.state")


def test_the_bundled_packages_are_imported_by_their_installed_names():
    """`import agents` would load whatever distribution owns that name (the OpenAI Agents SDK),
    or nothing in an installed wheel; the tests and tools are read as well as the packages."""
    assert set(IMPORT_NAMES) == {"agents", "graders", "outcomes"}
    assert all(name.startswith("prompt_optimizer_") for name in IMPORT_NAMES.values())
    sources = [path for folder in (*PACKAGES, "tests", "benchmarks", "examples")
               for path in sorted((ROOT / folder).rglob("*.py"))]
    by_folder_name = {f"{path.relative_to(ROOT)} -> {alias}" for path in sources
                      for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                      for alias in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                    else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
                      if alias and alias.split(".")[0] in IMPORT_NAMES}
    assert not by_folder_name, sorted(by_folder_name)


def builtin_graders() -> set[str]:
    """The names registered by `@grader` in `graders/`: the decorator's name, else the function's."""
    names = set()
    for module in (name for name in MODULES if within(name, GRADERS)):
        for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                call = decorator if isinstance(decorator, ast.Call) else None
                target = call.func if call else decorator
                if isinstance(target, ast.Name) and target.id == "grader":
                    named = call.args[0] if call and call.args and isinstance(call.args[0], ast.Constant) else None
                    names.add(named.value if named else node.name)
    return names


def test_the_harness_names_no_builtin_grader():
    names = builtin_graders()
    assert {"card_must_contain", "pkm_routed_correctly", "pkm_insight_quality"} <= names
    pattern = re.compile(r"\b(" + "|".join(sorted(names)) + r")\b")
    naming = {f"{path.relative_to(ROOT)}: {found.group(0)}"
              for path in sorted((ROOT / "optimizer").rglob("*")) if path.is_file() and path.suffix != ".pyc"
              for found in [pattern.search(path.read_text(encoding="utf-8", errors="replace"))] if found}
    assert not naming, sorted(naming)


def test_nothing_below_the_cli_imports_it():
    """Library code returns text and data; printing them is the command's part."""
    assert "optimizer.cli._common" in imports("optimizer.cli.review")
    callers = {f"{name} -> {target}" for name in MODULES if not within(name, "optimizer.cli")
               for target in imports(name) if within(target, "optimizer.cli")}
    assert not callers, sorted(callers)


PART_TAKERS = ("optimizer.trials.runner", "optimizer.trials.sim", "optimizer.comparison", "optimizer.gate",
               "optimizer.proposal", "optimizer.models")
"""The layers handed a part of the settings rather than the whole."""


def imported_names(name: str) -> set[str]:
    """`module.name` for every name `name` imports from a module (`from a.b import c` gives
    `a.b.c`), at any depth, `if TYPE_CHECKING:` included."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    return {f"{_absolute(name, node)}.{alias.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def test_the_layers_below_the_loop_take_their_part_of_the_settings():
    assert "optimizer.settings.parts.RunnerSettings" in imported_names("optimizer.trials.runner")
    whole = {f"{name} -> {target}" for name in MODULES if any(within(name, layer) for layer in PART_TAKERS)
             for target in imported_names(name) | imports(name)
             if target in ("optimizer.settings.config.Settings", "optimizer.settings.loading.load_settings")}
    assert not whole, sorted(whole)
    assert not {target for target in imports("optimizer.settings.parts") if within(target, "optimizer")}


SETTINGS_READERS = ("optimizer.cli", "optimizer.settings")
"""Where the whole settings record may be named: the commands that read it and cut it into parts,
and the settings package itself (its model, its loading, and a night's stored settings, the
run's spec that a resumed night reads back)."""


def test_only_the_commands_and_the_settings_package_name_the_whole_settings():
    """Below the commands every layer is handed `Settings.parts` (or a part of it); a resumed night
    gets its stored settings back as parts (`optimizer.settings.night.parts_of`)."""
    assert "optimizer.settings.config.Settings" in imported_names("optimizer.cli._common") | imported_names(
        "optimizer.settings.loading")
    whole = {f"{name} -> {target}" for name in MODULES if within(name, "optimizer")
             and not any(within(name, reader) for reader in SETTINGS_READERS)
             for target in imported_names(name) | imports(name)
             if target in ("optimizer.settings.config.Settings", "optimizer.settings.loading.load_settings",
                           "optimizer.settings.loading.put_in_use", "optimizer.settings.night.settings_of")}
    assert not whole, sorted(whole)


def test_optimizer_modules_import_each_other_without_a_cycle():
    graph = {name: {target for target in imports(name, top_level_only=True)
                    if target in MODULES and within(target, "optimizer") and target != name}
             for name in MODULES if within(name, "optimizer")}
    assert not _cycle(graph), " -> ".join(_cycle(graph))


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) == []


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` (its modules in order, the first repeated at the end), or []."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        state[node] = "done"
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []
