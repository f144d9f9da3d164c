"""The GitHub Actions workflow shipped in examples/github/nightly.yml (docs/ci.md) runs only
commands and flags our CLI has: a renamed flag fails here, not in a user's night."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import typer.main
import yaml

from tests.conftest import PROJECT_ROOT

WORKFLOW = PROJECT_ROOT / "examples" / "github" / "nightly.yml"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def optimizer_calls(document: dict) -> list[list[str]]:
    """Every `optimizer ...` command line of the workflow's `run:` steps, split as the shell would
    (backslash continuations joined, a redirection and what follows it dropped)."""
    calls = []
    for job in document["jobs"].values():
        for step in job["steps"]:
            script = step.get("run", "").replace("\\\n", " ")
            for line in script.splitlines():
                words = shlex.split(line.split(">", 1)[0])
                if words and words[0] == "optimizer":
                    calls.append(words[1:])
    return calls


def unknown_words(app: click.Group, words: list[str]) -> list[str]:
    """The options (and the subcommand) of one command line that the CLI does not have."""
    command = app.commands.get(words[0])
    if command is None:
        return [words[0]]
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    return [word.split("=", 1)[0] for word in words[1:]
            if word.startswith("-") and word.split("=", 1)[0] not in options]


def test_the_workflow_runs_the_nightly_on_a_schedule_and_can_open_a_pull_request():
    document = workflow()
    triggers = document[True] if True in document else document["on"]  # YAML 1.1 reads `on` as true
    assert re.fullmatch(r"(\S+\s+){4}\S+", triggers["schedule"][0]["cron"])
    assert document["permissions"] == {"contents": "write", "pull-requests": "write"}
    script = "\n".join(step.get("run", "") for job in document["jobs"].values() for step in job["steps"])
    assert "optimizer nightly" in script and "--format markdown > review.md" in script
    assert "gh pr create" in script and "--body-file review.md" in script


def test_every_optimizer_command_of_the_workflow_exists_with_its_flags():
    from optimizer.cli import app

    cli = typer.main.get_command(app)
    calls = optimizer_calls(workflow())
    assert [call[0] for call in calls] == ["nightly", "review"]
    assert {tuple(call): unknown_words(cli, call) for call in calls} == {tuple(call): [] for call in calls}


def test_the_check_catches_a_flag_the_cli_does_not_have():
    from optimizer.cli import app

    cli = typer.main.get_command(app)
    assert unknown_words(cli, ["nightly", "--max-iteration", "5", "--plain"]) == ["--max-iteration"]
    assert unknown_words(cli, ["revue", "--format", "markdown"]) == ["revue"]
