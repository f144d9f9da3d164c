"""Merging a proposal branch into the checked-out branch (`optimizer.gitops.merge_branch`)."""

from __future__ import annotations

import pytest

from tests.helpers import git


def test_a_merge_that_conflicts_says_why_and_leaves_the_checkout_as_it_was(tmp_path):
    from optimizer import gitops
    from optimizer.errors import InputError

    repo_path = tmp_path / "repo"
    repo_path.mkdir()
    git(repo_path, "init", "-q", "-b", "main")
    (repo_path / "prompt.md").write_text("one\ntwo\n")
    git(repo_path, "add", "-A")
    git(repo_path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base")
    git(repo_path, "switch", "-q", "-c", "proposal")
    (repo_path / "prompt.md").write_text("one\ntwo, as the proposal says\n")
    git(repo_path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", "proposal")
    git(repo_path, "switch", "-q", "main")
    (repo_path / "prompt.md").write_text("one\ntwo, as main says\n")
    git(repo_path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", "main moved on")
    head = git(repo_path, "rev-parse", "HEAD")
    repo = gitops.open_repo(repo_path)
    with repo.config_writer() as config:
        config.set_value("user", "name", "t")
        config.set_value("user", "email", "t@e")
    with pytest.raises(InputError) as raised:
        gitops.merge_branch(repo, "proposal", "merge it", fix="commit or stash your changes to the prompt file")
    error = raised.value
    assert "CONFLICT" in str(error) and "prompt.md" in str(error)
    assert "changed the same lines" in error.fix and "git merge proposal" in error.fix
    assert git(repo_path, "rev-parse", "HEAD") == head and git(repo_path, "status", "--porcelain") == ""
