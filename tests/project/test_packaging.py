"""What the wheel installs, read from pyproject without building it: the core `optimizer` and the
bundled agents, graders and outcomes under names of this project's own (their folders keep the
design's names), every package folder listed, and every entry point naming a module that imports;
and the core, its tool loop included, importing without them. The venv with another distribution
beside it is tests/project/test_two_distributions.py."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from tests.conftest import PROJECT_ROOT

PYPROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def folder_of(package: str) -> Path:
    """The folder setuptools takes `package` from: the `package-dir` mapping of its longest mapped
    prefix (`optimizer.prompt_manual`, `prompt_optimizer_agents`), else its own dotted name."""
    mapped = SETUPTOOLS.get("package-dir", {})
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in mapped:
            return PROJECT_ROOT / mapped[prefix] / Path(*parts[cut:])
    return PROJECT_ROOT / Path(*parts)


def test_the_wheel_installs_the_bundled_packages_under_this_projects_names():
    top_level = {package.split(".")[0] for package in SETUPTOOLS["packages"]}
    assert top_level == {"optimizer", "prompt_optimizer_agents", "prompt_optimizer_graders",
                         "prompt_optimizer_outcomes"}
    assert {folder_of(name).name for name in top_level} == {"optimizer", "agents", "graders", "outcomes"}


def test_every_package_folder_is_in_the_wheel():
    """A folder left out of the list still imports in an editable install and is missing from the
    wheel. Data folders (prompts, rubrics, templates, the prompt manual) are listed too: setuptools
    counts every folder under a package as one and warns at every install about any left out."""
    listed = {folder_of(package) for package in SETUPTOOLS["packages"]}
    folders = {folder for top in ("optimizer", "agents", "graders", "outcomes", "prompt_manual")
               for folder in [PROJECT_ROOT / top, *(PROJECT_ROOT / top).rglob("*")]
               if folder.is_dir() and "__pycache__" not in folder.parts}
    assert listed == folders, sorted(str(path.relative_to(PROJECT_ROOT)) for path in listed ^ folders)


def test_every_entry_point_names_an_installed_module():
    points = {f"{group}: {name}": value for group, entries in PYPROJECT["project"]["entry-points"].items()
              for name, value in entries.items()}
    assert len(points) >= 6
    installed = {package.split(".")[0] for package in SETUPTOOLS["packages"]}
    for point, value in points.items():
        module = value.split(":")[0]
        assert module.split(".")[0] in installed, point
        importlib.import_module(module)


def test_every_data_file_of_a_package_folder_is_in_the_wheel():
    """The prompts, tool schemas, simulator rules, rubrics, templates and the prompt manual the
    packages read beside their code (an editable install finds one left out; an installed wheel
    does not)."""
    shipped = {path for package, patterns in SETUPTOOLS["package-data"].items() for pattern in patterns
               for path in folder_of(package).glob(pattern) if path.is_file()}
    data = {path for top in ("optimizer", "agents", "graders", "outcomes", "prompt_manual")
            for path in (PROJECT_ROOT / top).rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts}
    agents = folder_of("prompt_optimizer_agents")
    assert {agents / "prompts" / "card_agent.user.md", agents / "card" / "sim_rules.json"} <= shipped
    manual = PROJECT_ROOT / "prompt_manual"
    assert {manual / "general.md", manual / "patcher_contrast" / "guided.yaml"} <= shipped
    assert data <= shipped, sorted(str(path.relative_to(PROJECT_ROOT)) for path in data - shipped)


def test_the_core_imports_without_the_bundled_packages():
    """Every `optimizer` module and every name of its public API (the tool loop included) imports
    in a process where the bundled packages, under their installed names and their folders',
    cannot be imported."""
    code = textwrap.dedent("""
        import importlib, importlib.abc, pkgutil, sys
        import optimizer

        class Absent(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"blocked: {name}")

        BLOCKED = {"agents", "graders", "outcomes", "prompt_optimizer_agents", "prompt_optimizer_graders",
                   "prompt_optimizer_outcomes"}
        sys.meta_path.insert(0, Absent())
        public = [getattr(optimizer, name) for name in optimizer.__all__]
        modules = [importlib.import_module(info.name)
                   for info in pkgutil.walk_packages(optimizer.__path__, "optimizer.")]
        assert not BLOCKED.intersection(name.split(".")[0] for name in sys.modules)
        print(len(public), len(modules), optimizer.ToolLoop.__module__)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT.parent,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    public, modules, home = done.stdout.split()
    assert int(public) >= 40 and int(modules) >= 80
    assert home == "optimizer.trials.tool_loop"


def test_a_project_without_a_prompt_manual_sends_the_one_that_ships(tmp_path):
    """A project of its own (no prompt_manual/) still sends the general rules and the agent's
    section; a project with a manual sends only its own files."""
    from optimizer.proposal.manual import shipped_manual
    from optimizer.proposal.request import load_manual

    assert shipped_manual() == PROJECT_ROOT / "prompt_manual"  # a checkout: no copy inside the package
    bare, checkout = load_manual(tmp_path, "card_agent"), load_manual(PROJECT_ROOT, "card_agent")
    assert (bare.text, bare.sha256) == (checkout.text, checkout.sha256)
    assert checkout.files == ("prompt_manual/general.md", "prompt_manual/card_agent.md")
    # recorded as the optimizer's own manual, not as files the project does not have
    assert bare.files == ("optimizer/prompt_manual/general.md", "optimizer/prompt_manual/card_agent.md")
    (tmp_path / "prompt_manual").mkdir()
    (tmp_path / "prompt_manual" / "general.md").write_text("Our own rules.\n", encoding="utf-8")
    own = load_manual(tmp_path, "card_agent")
    assert (own.text, own.files) == ("Our own rules.", ("prompt_manual/general.md",))
