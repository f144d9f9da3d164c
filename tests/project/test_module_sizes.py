"""The package's sizes stay readable: no module of `optimizer/` over 400 lines, no class over 250,
no function over 60, and at most 15 modules at the top of `optimizer/` beside its subpackages
(docs/concepts.md#layout)."""

from __future__ import annotations

import ast

from tests.conftest import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "optimizer"
LIMITS = {"module": 400, "class": 250, "function": 60}


def oversized(source: str, name: str) -> list[str]:
    """What in `source` is over its limit, as 'name: kind of n lines'."""
    found = []
    lines = len(source.splitlines())
    if lines > LIMITS["module"]:
        found.append(f"{name}: module of {lines} lines")
    for node in ast.walk(ast.parse(source)):
        kind = ("class" if isinstance(node, ast.ClassDef) else
                "function" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
        if kind and node.end_lineno - node.lineno + 1 > LIMITS[kind]:
            found.append(f"{name}: {kind} {node.name} of {node.end_lineno - node.lineno + 1} lines")
    return found


def test_no_module_class_or_function_of_the_package_is_over_its_limit():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100, "the package was read"
    found = [item for path in modules
             for item in oversized(path.read_text(encoding="utf-8"), str(path.relative_to(PROJECT_ROOT)))]
    assert not found, found


def test_the_top_of_the_package_holds_few_modules():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 15, top


def test_the_size_check_finds_a_long_function():
    body = "\n".join(f"    x{n} = {n}" for n in range(61))
    assert oversized(f"def long():\n{body}\n", "m.py") == ["m.py: function long of 62 lines"]
    assert oversized("def short():\n    return 1\n", "m.py") == []
