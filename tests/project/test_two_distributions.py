"""This project and the OpenAI Agents SDK (`openai-agents`, whose import name is `agents`) in one
fresh venv: both import in one process, the optimizer registering its bundled agents and graders
beside the SDK's `agents`, and the installed `optimizer` command validates the suites.

Everything is installed offline from the wheelhouse `make test-packaging` fills first (this
project's wheel, the SDK, and every dependency of both); without one the tests are skipped, or
fail where CI=true. Marker `packaging`, not part of `make test`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.packaging

WHEELHOUSE = Path(os.environ.get("PACKAGING_WHEELHOUSE", PROJECT_ROOT / ".optimizer" / "wheelhouse"))
SDK = "openai-agents"


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv holding this project's wheel and the SDK, installed without an index."""
    if not list(WHEELHOUSE.glob("prompt_optimizer-*.whl")) or not list(WHEELHOUSE.glob("openai_agents-*.whl")):
        message = f"no wheelhouse at {WHEELHOUSE}: run `make test-packaging`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    folder = tmp_path_factory.mktemp("two_distributions") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True)
    done = subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
                           "--disable-pip-version-check", "--find-links", str(WHEELHOUSE), "prompt-optimizer", SDK],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder


def run(venv: Path, command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={**environment, "PATH": f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}", **env})


def test_the_sdk_and_the_optimizer_import_side_by_side(venv, tmp_path):
    code = textwrap.dedent("""
        import agents, optimizer
        from optimizer.registry import agents as registered, graders

        assert agents.Agent(name="sdk", instructions="hi").name == "sdk"
        names = sorted(registered()), sorted(graders())
        print(agents.__file__, optimizer.__file__, optimizer.ToolLoop.__module__, *names[0], len(names[1]))
    """)
    done = run(venv, [str(venv / "bin" / "python"), "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    sdk, core, loop, *names, graders = done.stdout.split()
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert Path(sdk) == site / "agents" / "__init__.py" and Path(core) == site / "optimizer" / "__init__.py"
    assert loop == "optimizer.trials.tool_loop" and names == ["card_agent", "pkm_agent"] and int(graders) >= 10
    owners = {path.name for path in (site / "agents").iterdir()}
    assert "card" not in owners and "prompts" not in owners  # nothing of this project landed in the SDK's folder


def test_the_installed_optimizer_validates_the_suites_beside_the_sdk(venv, tmp_path):
    project = tmp_path / "project"
    for folder in ("suites", "agents", "fixtures"):
        shutil.copytree(PROJECT_ROOT / folder, project / folder, ignore=shutil.ignore_patterns("__pycache__"))
    done = run(venv, [str(venv / "bin" / "optimizer"), "suites", "validate"], project,
               OPTIMIZER_ROOT=str(project), OPTIMIZER_STATE_DIR=str(tmp_path / "state"),
               OPTIMIZER_AGENT_MODEL="mock/sim", OPTIMIZER_JUDGE_MODEL="mock/sim", OPTIMIZER_PATCHER_MODEL="mock/sim")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "card_agent" in done.stdout and "pkm_agent" in done.stdout


def test_the_installed_optimizer_reads_the_prompt_manual_it_ships(venv, tmp_path):
    """Every file of prompt_manual/ is in the wheel, inside the core; the contrast patcher's texts
    are read from there, and a project without a manual of its own sends the shipped one."""
    code = textwrap.dedent("""
        import sys
        from pathlib import Path
        from optimizer.proposal.contrast import FOLDER, instructions
        from optimizer.proposal.manual import shipped_manual
        from optimizer.proposal.request import load_manual

        folder = shipped_manual()
        assert FOLDER == folder / "patcher_contrast" and instructions()
        manual = load_manual(Path(sys.argv[1]), "card_agent")
        assert manual.files == ("optimizer/prompt_manual/general.md", "optimizer/prompt_manual/card_agent.md"), manual.files
        print(manual.sha256, folder)
        for name in sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*")
                           if path.is_file() and "__pycache__" not in path.parts):
            print(name)
    """)
    done = run(venv, [str(venv / "bin" / "python"), "-c", code, str(tmp_path)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    first, *files = done.stdout.splitlines()
    sha256, folder = first.split()
    site = next((venv / "lib").glob("python3*/site-packages"))
    source = PROJECT_ROOT / "prompt_manual"
    assert Path(folder) == site / "optimizer" / "prompt_manual"
    assert files == sorted(path.relative_to(source).as_posix() for path in source.rglob("*") if path.is_file())
    from optimizer.proposal.request import load_manual

    assert sha256 == load_manual(PROJECT_ROOT, "card_agent").sha256
