"""Every script in benchmarks/ loads: its imports still name what the project has (a renamed or
moved function breaks a benchmark that no other test runs)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import PROJECT_ROOT

SCRIPTS = sorted((PROJECT_ROOT / "benchmarks").glob("*.py"))


def test_there_are_scripts_to_load():
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_the_script_loads(path, monkeypatch):
    """Run as a module (not as `__main__`, so nothing starts): every import at its top resolves."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # a script may put the project first on the path
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    assert module.__doc__, f"{path.name} says what it measures in its docstring"
