"""A plugin from outside the repository, installed as a team would install theirs: its agent,
typed outcome and grader, found through entry points and run by `optimizer eval`.

The example (`examples/echo_plugin`) is packed into a wheel here and installed with pip into a
folder of its own, which the commands then find on their path: a build backend would need
setuptools' `bdist_wheel` (absent from a fresh venv) or the network, and the venv stays as it was.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from optimizer.store import Store, default_url
from tests.conftest import PROJECT_ROOT

EXAMPLE = PROJECT_ROOT / "examples" / "echo_plugin"
HALF_RIGHT = {"id": "echo_half_right", "metadata": {"failure_bucket": "repeats_the_note"},
              "input": {"content": "Call Grace about the ferns"},
              "reference_solution": {"tool_calls": [{"name": "save_reply", "arguments": {"text": "Call Grace"}}]},
              "graders": [{"name": "echo_says", "config": {"words": ["Grace", "ferns"]}}]}
"""A task whose reference reply leaves out one of the two graded words (added to a copy only)."""


def wheel_of(source: Path, folder: Path) -> Path:
    """A wheel of a pure-Python project: its packages and a dist-info naming its entry points."""
    project = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name, version = project["name"].replace("-", "_"), project["version"]
    info = f"{name}-{version}.dist-info"
    files = {path.relative_to(source).as_posix(): path.read_bytes()
             for package in sorted(init.parent for init in source.glob("*/__init__.py"))
             for path in sorted(package.rglob("*.py"))}
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {version}\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/entry_points.txt"] = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items()) + "\n"
        for group, points in project["entry-points"].items()).encode()
    files[f"{info}/RECORD"] = ("".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{info}/RECORD,,\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The folder pip installed the example plugin into."""
    folder = tmp_path_factory.mktemp("echo_plugin")
    target = folder / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--disable-pip-version-check", "--target", str(target), str(wheel_of(EXAMPLE, folder))],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return target


def optimizer(site: Path, project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
           "OPTIMIZER_ROOT": str(project)}
    return subprocess.run([str(Path(sys.executable).parent / "optimizer"), *args], capture_output=True, text=True,
                          env=env, cwd=project)


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the example's project folder (its prompt and suite), with one more task."""
    copy = tmp_path / "project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("echo_plugin", "__pycache__"))
    (copy / "suites/echo/tasks/half_right.json").write_text(json.dumps(HALF_RIGHT), encoding="utf-8")
    return copy


def test_the_example_plugin_is_not_importable_from_the_repository():
    assert not (PROJECT_ROOT / "echo_plugin").exists()
    done = subprocess.run([sys.executable, "-c", "import echo_plugin"], capture_output=True, cwd=PROJECT_ROOT)
    assert done.returncode != 0


def test_an_installed_plugin_runs_its_suite_with_its_grader(installed, project, isolated):
    done = optimizer(installed, project, "eval", "--suite", "echo", "--agent-model", "mock/oracle",
                     "--json", str(project / "eval.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((project / "eval.json").read_text())
    assert {task["task_id"]: task["score"] for task in summary["tasks"]} == {
        "echo_greeting": 1.0, "echo_reminder": 1.0, "echo_half_right": 0.5}

    store = Store(default_url(isolated))
    try:
        trials = {trial.task_id: trial for trial in store.trials.load(summary["run_id"])}
    finally:
        store.close()
    half = trials["echo_half_right"]
    assert half.outcome.environment_state == {"reply": "Call Grace", "saves": 1}
    assert [(r.grader, r.score, r.rationale) for r in half.grader_results] == [("echo_says", 0.5, "missing: ferns")]


def test_the_hard_coding_lint_reads_the_plugins_answer_key_marks(installed, project):
    script = ("from pathlib import Path; from optimizer.proposal.patch import LintIndex, lint; "
              "from optimizer.suites import load_suite; "
              f"index = LintIndex.from_suites([load_suite('echo', Path({str(project)!r}))]); "
              "print(lint('', 'Always mention the ferns.', index).reason); print(lint('', 'Be brief.', index).passed)")
    env = {**os.environ, "PYTHONPATH": str(installed), "OPTIMIZER_ROOT": str(project)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "the patch copies evaluation data: expected reply word 'ferns'", "True"]
