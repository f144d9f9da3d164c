"""The shell blocks that README.md and docs/*.md mark runnable (a fence of ```bash runnable) run
as written, on mock models, in a throw-away copy of the project (docs/cli.md says how to mark
one). A page that shows a command which no longer exists, or takes other options, fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from optimizer.settings.config import Settings
from tests.conftest import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
OPENING = re.compile(r"^```bash runnable\s*$")
CLOSING = re.compile(r"^```\s*$")
BLOCK_TIMEOUT_S = 60


def runnable_blocks(page: Path, root: Path = PROJECT_ROOT) -> list[tuple[str, str]]:
    """(where, script) of every runnable block of a page, `where` being `page:line` (the fence's
    line, the page relative to `root`)."""
    blocks, lines = [], page.read_text(encoding="utf-8").splitlines()
    start = None
    for number, line in enumerate(lines, 1):
        if start is None and OPENING.match(line):
            start = number
        elif start is not None and CLOSING.match(line):
            blocks.append((f"{page.relative_to(root)}:{start}", "\n".join(lines[start:number - 1])))
            start = None
    assert start is None, f"{page.name}:{start}: a runnable block is never closed"
    return blocks


def all_blocks() -> list[tuple[str, str]]:
    return [block for page in PAGES for block in runnable_blocks(page)]


def optimizer_command(bin_dir: Path) -> None:
    """`.venv/bin/optimizer` and `.venv/bin/python` of the copy: the installed entry point beside
    this interpreter (or a wrapper that runs the CLI with this interpreter when there is none),
    and this interpreter."""
    bin_dir.mkdir(parents=True)
    installed = Path(sys.executable).parent / "optimizer"
    target = bin_dir / "optimizer"
    if installed.is_file():
        target.symlink_to(installed)
    else:
        target.write_text(f"#!/bin/sh\nexec '{sys.executable}' -c 'from optimizer.cli import main; main()' \"$@\"\n")
        target.chmod(0o755)
    python = bin_dir / "python"  # a wrapper, not a link: a link's interpreter would not find its venv
    python.write_text(f"#!/bin/sh\nexec '{sys.executable}' \"$@\"\n")
    python.chmod(0o755)


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """A git repository holding the suites, agents, manual and fixtures, as `make demo` makes."""
    root = tmp_path / "project"
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in ("suites", "agents", "prompt_manual", "fixtures"):
        shutil.copytree(PROJECT_ROOT / folder, root / folder, ignore=ignore)
    (root / "pyproject.toml").write_text("[tool.optimizer]\nconcurrency = 8\n")
    optimizer_command(root / ".venv" / "bin")
    (root / ".gitignore").write_text(".venv\n.optimizer\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=Docs", "-c", "user.email=docs@example.com", "commit", "-qm", "docs base"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


@pytest.mark.slow
def test_every_runnable_block_in_the_docs_exits_0(project_copy):
    blocks = all_blocks()
    assert blocks, "no block of README.md or docs/*.md is marked ```bash runnable"
    env = {**os.environ, "OPTIMIZER_ROOT": str(project_copy), "OPTIMIZER_PLAIN": "1",
           "PATH": f"{project_copy / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    for where, script in blocks:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=project_copy, env=env,
                              capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        assert done.returncode == 0, (f"{where} exited {done.returncode}:\n{script}\n"
                                      f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


def test_only_closed_bash_runnable_fences_are_runnable_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\nnot run\n```\n\n```bash runnable\necho one\necho two\n```\n\n"
                    "```python runnable\nx = 1\n```\n")
    assert runnable_blocks(page, tmp_path) == [("page.md:5", "echo one\necho two")]


def test_settings_page_lists_every_setting_with_its_environment_variable():
    page = (PROJECT_ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    missing = [name for name in Settings.model_fields
               if f"| `{name}` | `OPTIMIZER_{name.upper()}` |" not in page]
    assert not missing, f"docs/settings.md does not list: {', '.join(missing)}"
