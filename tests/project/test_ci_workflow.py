"""The CI recipes (docs/ci.md): the hosted nightly (examples/github/nightly.yml), the gate on
pull requests (examples/github/prompt-pr.yml) and the self-hosted nightly
(docs/scheduling/github-actions-nightly.yml).

Read statically, each runs only commands and flags our CLI has, installs this project, keeps the
store when a step fails and needs nothing the default proposer does not use. Then the hosted
recipes are run for real the way a runner would, step by step in a fresh clone with a bare
repository as `origin` and `gh` replaced by a recorder: `act` (the usual local runner) needs
Docker and GitHub's runner images, which this machine cannot fetch, so the steps' shell scripts
are run as GitHub runs them (`bash -eo pipefail`), with their `${{ }}` expressions filled in and
the `uses:` steps (checkout, Python, cache, artifact) done by the test itself or left out."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer.main
import yaml

from tests.conftest import PROJECT_ROOT
from tests.helpers import DATA_LINE, LINK_HARM, PROMPT, git, project_repo

NIGHTLY = PROJECT_ROOT / "examples" / "github" / "nightly.yml"
PULL_REQUEST = PROJECT_ROOT / "examples" / "github" / "prompt-pr.yml"
SELF_HOSTED = PROJECT_ROOT / "docs" / "scheduling" / "github-actions-nightly.yml"
RECIPES = (NIGHTLY, PULL_REQUEST, SELF_HOSTED)
METRIC_RULE = "- Use metric for a measured value with its unit, such as a reading the user tracks."


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def triggers(document: dict) -> dict:
    return document[True] if True in document else document["on"]  # YAML 1.1 reads `on` as true


def steps(document: dict) -> list[dict]:
    return [step for job in document["jobs"].values() for step in job["steps"]]


def optimizer_calls(document: dict) -> list[list[str]]:
    """Every `optimizer ...` command line of the workflow's `run:` steps, split as the shell would
    (backslash continuations joined, a redirection and what follows it dropped)."""
    calls = []
    for step in steps(document):
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            words = shlex.split(line.split(">", 1)[0])
            for start, word in enumerate(words):
                if word.endswith("optimizer") and word.split("/")[-1] == "optimizer":
                    calls.append(words[start + 1:])
                    break
    return calls


def unknown_words(app: click.Group, words: list[str]) -> list[str]:
    """The options (and the subcommand) of one command line that the CLI does not have."""
    command = app.commands.get(words[0])
    if command is None:
        return [words[0]]
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    return [word.split("=", 1)[0] for word in words[1:]
            if word.startswith("-") and word.split("=", 1)[0] not in options]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.name)
def test_every_optimizer_command_of_a_recipe_exists_with_its_flags(recipe):
    from optimizer.cli import app

    cli = typer.main.get_command(app)
    calls = optimizer_calls(load(recipe))
    assert calls
    assert {tuple(call): unknown_words(cli, call) for call in calls} == {tuple(call): [] for call in calls}


def test_the_check_catches_a_flag_the_cli_does_not_have():
    from optimizer.cli import app

    cli = typer.main.get_command(app)
    assert unknown_words(cli, ["nightly", "--max-iteration", "5", "--plain"]) == ["--max-iteration"]
    assert unknown_words(cli, ["revue", "--format", "markdown"]) == ["revue"]


@pytest.mark.parametrize("recipe", (NIGHTLY, PULL_REQUEST), ids=lambda path: path.name)
def test_a_hosted_recipe_installs_this_project_and_nothing_the_default_proposer_does_not_use(recipe):
    text = recipe.read_text()
    installs = [step["run"] for step in steps(load(recipe)) if "pip install" in step.get("run", "")]
    assert installs == ["python -m pip install --quiet ."], "this repository, never a name on the package index"
    assert (PROJECT_ROOT / "pyproject.toml").is_file()
    assert "bubblewrap" not in text and "apt-get" not in text


def test_the_nightly_keeps_the_store_whatever_fails_and_updates_its_pull_request_when_run_again():
    document = load(NIGHTLY)
    assert re.fullmatch(r"(\S+\s+){4}\S+", triggers(document)["schedule"][0]["cron"])
    assert document["permissions"] == {"contents": "write", "pull-requests": "write"}
    uses = {step.get("uses", "").split("@")[0]: step for step in steps(document)}
    assert "actions/cache" not in uses, "actions/cache saves only when every step succeeded"
    restore, save = uses["actions/cache/restore"], uses["actions/cache/save"]
    assert save["if"] == "always()" and save["with"]["path"] == restore["with"]["path"] == ".optimizer"
    assert save["with"]["key"] == restore["with"]["key"] and save["with"]["key"].startswith(
        restore["with"]["restore-keys"])
    script = "\n".join(step.get("run", "") for step in steps(document))
    assert "optimizer review --night" in script and "gh pr edit" in script and "gh pr create" in script
    assert "Allow GitHub Actions to create and approve pull requests" in NIGHTLY.read_text()


def test_the_self_hosted_recipe_keeps_its_store_and_may_push():
    document = load(SELF_HOSTED)
    assert document["permissions"] == {"contents": "write"}
    checkout = next(step for step in steps(document) if step.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["clean"] is False, "the checkout's git clean would delete the ignored .optimizer/"


def test_the_pull_request_recipe_gates_prompt_edits_and_fails_the_check_with_the_gate():
    document = load(PULL_REQUEST)
    assert triggers(document)["pull_request"]["paths"] == ["agents/prompts/**"]
    assert document["permissions"] == {"contents": "read", "pull-requests": "write"}
    names = [step.get("name") for step in steps(document)]
    comment, verdict = steps(document)[names.index("Comment with the review")], steps(document)[-1]
    assert comment["if"].startswith("always()")
    assert verdict["run"] == 'exit "${CODE:-3}"' and verdict["env"]["CODE"] == "${{ steps.gate.outputs.code }}"


# ------------------------------------------------------------------------------------------ run for real


class Runner:
    """Runs a recipe's job in `clone` as GitHub's runner would: `run:` steps in order under
    `bash -eo pipefail`, a step without `if: always()` skipped after a failure, `${{ }}`
    expressions from `values` (and the steps' outputs), `uses:` steps left to the test."""

    def __init__(self, clone: Path, env: dict[str, str], values: dict[str, str]):
        self.clone, self.env, self.values = clone, env, values
        self.outputs: dict[str, dict[str, str]] = {}
        self.ran: list[tuple[str, int]] = []

    def expand(self, text: str) -> str:
        def value(match: re.Match) -> str:
            name = match.group(1).strip()
            step = re.fullmatch(r"steps\.(\w+)\.outputs\.(\w+)", name)
            if step:
                return self.outputs.get(step.group(1), {}).get(step.group(2), "")
            assert name in self.values, f"the test does not know the expression {name}"
            return self.values[name]

        return re.sub(r"\$\{\{(.*?)\}\}", value, text)

    def run(self, document: dict) -> bool:
        failed = False
        job = next(iter(document["jobs"].values()))
        base_env = {name: self.expand(str(value)) for name, value in (job.get("env") or {}).items()}
        for step in job["steps"]:
            if "run" not in step or "pip install" in step["run"]:
                continue  # checkout, Python, cache, artifact; the test's venv has this project installed
            if failed and not str(step.get("if", "")).startswith("always()"):
                continue
            output = self.clone / ".github-output"
            output.write_text("")
            env = {**base_env, **{k: self.expand(str(v)) for k, v in (step.get("env") or {}).items()},
                   **self.env, "GITHUB_OUTPUT": str(output)}
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                                   self.expand(step["run"])], cwd=self.clone, env=env, capture_output=True,
                                  text=True, timeout=900)
            self.ran.append((step.get("name", step["run"][:30]), done.returncode))
            if step.get("id"):
                self.outputs[step["id"]] = dict(line.split("=", 1) for line in output.read_text().splitlines()
                                                if "=" in line)
            failed = failed or done.returncode != 0
            self.log = getattr(self, "log", "") + f"\n--- {step.get('name')}: {done.returncode}\n" \
                + done.stdout[-2000:] + done.stderr[-3000:]
        return not failed


GH = """#!/bin/sh
# `gh` as the recipes call it: records every call; a pull request exists once created.
echo "$*" >> "$GH_LOG"
case "$1 $2" in
  "pr view") grep -q "^pr create .*--head $3 " "$GH_LOG" ;;
  "pr comment") case "$*" in *--edit-last*) exit 1 ;; esac ;;
esac
"""


@pytest.fixture
def origin(tmp_path) -> tuple[Path, dict[str, str]]:
    """This project as a repository pushed to a bare `origin`, and the environment a runner of it
    has: this project's `optimizer` on PATH, `gh` recorded, mock/sim models, the stand-in coding
    agent as the proposer, the store in the clone's `.optimizer/` (where the recipe's cache keeps it)."""
    source = project_repo(tmp_path / "source")
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(source, "remote", "add", "origin", str(bare))
    git(source, "push", "-q", "origin", "main")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(GH)
    (bin_dir / "gh").chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPTIMIZER_")}
    env.update(PATH=f"{bin_dir}:{Path(sys.executable).parent}:{env['PATH']}", GH_LOG=str(tmp_path / "gh.log"),
               OPTIMIZER_AGENT_MODEL="mock/sim", OPTIMIZER_JUDGE_MODEL="mock/sim", OPTIMIZER_PROPOSER="command",
               OPTIMIZER_PROPOSER_COMMAND=f"{sys.executable} {PROJECT_ROOT / 'benchmarks/sim_patcher.py'} "
                                          f"{{request}} {{workdir}} {PROMPT}",
               OPTIMIZER_RETRY_BASE_DELAY="0.01", HOME=str(tmp_path))
    env.pop("OPENAI_API_KEY", None)
    return bare, env


def clone(bare: Path, folder: Path, ref: str = "main") -> Path:
    git(bare.parent, "clone", "-q", str(bare), str(folder))
    git(folder, "checkout", "-q", ref)
    return folder


@pytest.mark.slow
def test_the_nightly_recipe_runs_opens_its_pull_request_and_a_rerun_the_same_day_opens_another(origin, tmp_path):
    bare, env = origin
    values = {"secrets.OPENAI_API_KEY": "", "github.token": "test-token"}
    first = Runner(clone(bare, tmp_path / "first"), env, values)
    assert first.run(load(NIGHTLY)), first.log
    calls = Path(env["GH_LOG"]).read_text().splitlines()
    created = [call for call in calls if call.startswith("pr create")]
    assert len(created) == 1 and "--body-file review.md" in created[0], calls
    body = (first.clone / "review.md").read_text()
    assert body.startswith("## Prompt night `") and "stacked on the branch" in body
    assert (first.clone / "view-pages" / "index.html").is_file()
    branches = git(bare, "branch", "--list", "optimizer/nightly-*").split()
    assert len(branches) == 1
    # run again the same day, as "Re-run jobs" does: a fresh clone, the store restored by the cache
    again = Runner(clone(bare, tmp_path / "again"), env, values)
    subprocess.run(["cp", "-r", str(first.clone / ".optimizer"), str(again.clone / ".optimizer")], check=True)
    assert again.run(load(NIGHTLY)), again.log
    assert len(git(bare, "branch", "--list", "optimizer/nightly-*").split()) == 2, "a second branch, not a refused push"


@pytest.mark.parametrize("lines, code, said", [((METRIC_RULE,), 0, "Prompt gate: passed"),
                                               ((METRIC_RULE, LINK_HARM), 1, "template\\_link fell")])
@pytest.mark.slow
def test_the_pull_request_recipe_comments_and_its_check_follows_the_gate(origin, tmp_path, lines, code, said):
    bare, env = origin
    author = clone(bare, tmp_path / "author")
    git(author, "checkout", "-q", "-b", "edit")
    path = author / PROMPT
    path.write_text(path.read_text().replace(DATA_LINE, "\n".join([DATA_LINE, *lines])))
    git(author, "commit", "-q", "-am", "a hand edit")
    git(author, "push", "-q", "origin", "edit")
    runner = Runner(clone(bare, tmp_path / "runner", "origin/edit"), env,
                    {"secrets.OPENAI_API_KEY": "", "github.token": "test-token", "github.base_ref": "main",
                     "github.event.pull_request.number": "7"})
    passed = runner.run(load(PULL_REQUEST))
    assert passed is (code == 0), runner.log
    assert runner.ran[-1] == ("The gate's verdict", code)
    assert said in (runner.clone / "gate.md").read_text()
    comments = [call for call in Path(env["GH_LOG"]).read_text().splitlines() if call.startswith("pr comment 7")]
    assert comments == ["pr comment 7 --edit-last --body-file gate.md", "pr comment 7 --body-file gate.md"]
