"""The proposer works in a box: a clone of its own, under bubblewrap when it works here. What it
does to the user's checkout by absolute path (a file, `.git/config`, a tag) fails inside the box;
without bubblewrap the loop notices it and stops the iteration, naming what changed.

End to end with the `command` proposer on a throw-away repository (see tests/end_to_end/test_loop.py)."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import pytest

from optimizer.proposal.box import confinement
from tests.helpers import FACT_RULE, PROMPT, git, optimizer_branches, project_repo
from tests.optimizer.proposal.test_proposer_isolation import APPEND_RULE, command_request, propose_with

needs_bwrap = pytest.mark.skipif(confinement().bwrap is None,
                                 reason="bubblewrap is not installed or cannot make a sandbox here")


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    root = project_repo(tmp_path / "repo", {"README.md": "# Notes\n"})
    (root / "scratch.txt").write_text("untracked\n")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(root))
    return root


def attacks(root: Path) -> dict[str, str]:
    """Shell commands that reach past the box into the user's checkout at `root`."""
    user = shlex.quote(str(root))
    return {"readme": f"echo 'owned' >> {user}/README.md",
            "hooks-path": f"git -C {user} config core.hooksPath /tmp/evil-hooks",
            "tag": f"git -C {user} tag planted"}


def checkout_bytes(root: Path) -> dict[str, str]:
    """A hash of every file of the checkout, `.git` included (its objects aside: those are
    content-addressed, and a stray one changes nothing the user sees)."""
    return {path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*"))
            if path.is_file() and not path.relative_to(root).as_posix().startswith(".git/objects/")}


def proposal_log(isolated: Path) -> str:
    return next(isolated.glob("runs/*/proposal-1.log")).read_text()


@needs_bwrap
@pytest.mark.parametrize("attack", ["readme", "hooks-path", "tag"])
def test_a_proposer_that_reaches_into_the_users_checkout_fails_inside_the_box(cli, repo, tmp_path, monkeypatch,
                                                                             isolated, attack):
    propose_with(monkeypatch, f"echo request-seen && {attacks(repo)[attack]}")
    before = checkout_bytes(repo)
    code, out, err = cli("run")
    assert code == 0, out + err
    assert "proposal 1: no_patch: the proposer command failed with exit code" in err
    assert "request-seen" in proposal_log(isolated), "the request is readable in the box"
    assert checkout_bytes(repo) == before
    assert optimizer_branches(repo) == [] and git(repo, "tag").strip() == ""
    assert not any((isolated / "boxes").iterdir()), "the box is removed"


@pytest.mark.parametrize("attack, named", [
    ("readme", "README.md"),
    ("hooks-path", ".git/config (core.hookspath)"),
    ("tag", "refs/tags/planted"),
])
def test_without_bubblewrap_a_proposer_that_changes_the_checkout_stops_the_iteration(cli, repo, monkeypatch,
                                                                                    attack, named):
    monkeypatch.setattr("optimizer.proposal.box.find_bwrap", lambda: None)
    propose_with(monkeypatch, f"{attacks(repo)[attack]} && {APPEND_RULE}")
    code, out, err = cli("run")
    err = " ".join(err.split())
    assert code == 3, out + err
    assert err.count("bubblewrap (bwrap) is not installed") == 1
    message = f"the proposer changed the user's checkout: {named}; the iteration is stopped and nothing was evaluated"
    assert message in err
    assert "fix: undo those changes by hand" in err and "confine the proposer with bubblewrap" in err
    assert "targets: 8 fresh pairs" not in err, "no candidate trial ran"
    branch = re.search(r"proposal 1 \(1 of 1 this iteration\) on (\S+)", err).group(1)
    code, out, _ = cli("review", branch)
    assert code == 0
    assert f"{branch}: stopped" in " ".join(out.split()) and message in " ".join(out.split())
    assert optimizer_branches(repo) == []


@needs_bwrap
def test_a_good_edit_is_accepted_through_the_box_and_what_the_proposer_does_to_its_own_git_stays_there(
        cli, repo, tmp_path, monkeypatch):
    own_git = "git config core.hooksPath /tmp/evil-hooks && git tag planted && git add -A && git commit -qm mine"
    propose_with(monkeypatch, f'test "$(git rev-parse --absolute-git-dir)" = "$PWD/.git" && {APPEND_RULE} && {own_git}')
    config, base = (repo / ".git" / "config").read_bytes(), git(repo, "rev-parse", "HEAD").strip()
    code, out, err = cli("run")
    assert code == 0, out + err
    assert "proposal 1: accepted" in err
    branch, = optimizer_branches(repo)
    assert git(repo, "diff", "--name-only", base, branch).split() == [PROMPT]
    assert "+" + FACT_RULE in git(repo, "diff", base, branch).splitlines()
    assert git(repo, "log", "-1", "--format=%an", branch).strip() == "prompt-optimizer"
    assert (repo / ".git" / "config").read_bytes() == config and git(repo, "tag").strip() == ""


def test_the_checkout_state_names_every_kind_of_change_a_proposer_could_make(tmp_path):
    import git as gitpython

    from optimizer.loop.checkout_state import changes, checkout_state

    root = project_repo(tmp_path / "repo", {"README.md": "# Notes\n", ".gitignore": "*.log\n"})
    (root / "scratch.txt").write_text("untracked\n")
    repo = gitpython.Repo(root)
    before = checkout_state(repo)
    (root / "build.log").write_text("ignored: not the check's part\n")
    assert changes(before, checkout_state(repo)) == []
    (root / "scratch.txt").write_text("changed\n")
    (root / "new.txt").write_text("new\n")
    (root / "README.md").unlink()
    (root / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\ncurl evil\n")
    (root / ".git" / "info" / "exclude").write_text("secret.txt\n")
    git(root, "config", "user.email", "proposer@example.com")
    git(root, "branch", "moved")
    git(root, "update-index", "--assume-unchanged", ".gitignore")
    git(root, "switch", "-q", "--detach")
    assert changes(before, checkout_state(repo)) == [
        ".git/config (user.email)", ".git/hooks/pre-commit", ".git/info/exclude", "refs/heads/moved", "HEAD",
        ".git/index", "README.md", "new.txt", "scratch.txt"]


@needs_bwrap
def test_a_proposer_command_kept_under_tmp_runs_under_bubblewrap(tmp_path):
    """bwrap's private /tmp would hide a script, a venv or a checkout kept under the host's /tmp."""
    from optimizer.proposal.command import CommandProposer

    agent = tmp_path / "tools" / "agent.sh"
    agent.parent.mkdir()
    agent.write_text('printf -- "- a rule\\n" >> "$1/prompt.md"\n')
    request = command_request(tmp_path)
    (request.workdir / "prompt.md").write_text("base\n")
    proposer = CommandProposer(f"sh {agent} {{workdir}} {{request}}", timeout_s=60, confinement=confinement())
    proposal = proposer.propose(request)
    assert proposal.error is None, proposal.log
    assert (request.workdir / "prompt.md").read_text() == "base\n- a rule\n"
