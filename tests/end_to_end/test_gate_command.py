"""`optimizer gate`: a hand edit of a prompt, committed on a branch as a pull request would be,
gated against its base on mock/sim: a good edit passes, a harmful one fails naming the bucket
that fell, and bad input is exit 2 before any trial runs."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.helpers import DATA_LINE, LINK_HARM, PROMPT, git

METRIC_RULE = "- Use metric for a measured value with its unit, such as a reading the user tracks."


def edit(repo, branch: str, *lines: str) -> None:
    git(repo, "checkout", "-q", "-b", branch, "main")
    path = repo / PROMPT
    path.write_text(path.read_text().replace(DATA_LINE, "\n".join([DATA_LINE, *lines])))
    git(repo, "commit", "-q", "-am", f"edit: {branch}")


def test_a_good_hand_edit_passes_with_its_review(cli, repo, isolated, tmp_path):
    edit(repo, "good", METRIC_RULE)
    code, out, err = cli("gate", "--base", "main", "--json", str(tmp_path / "gate.json"))
    assert code == 0, out + err
    assert out.startswith("## Prompt gate: passed")
    assert "card_agent/template_metric" in out and "**gate (strict, full): ACCEPTED**" in out
    assert "+" + METRIC_RULE in out and "card_agent: accepted: card_agent/template_metric" in err
    summary = json.loads((tmp_path / "gate.json").read_text())
    assert summary["passed"] is True and summary["agents"]["card_agent"]["status"] == "accepted"
    with sqlite3.connect(isolated / "optimizer.db") as db:
        kinds = db.execute("select kind from iterations").fetchall()
        proposers = db.execute("select proposer from proposals").fetchall()
    assert kinds == [("gate",)] and proposers == [("hand-edit",)]
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "good", "the checkout is left as it was"


def test_a_harmful_hand_edit_fails_the_job_naming_the_bucket_that_fell(cli, repo, isolated, tmp_path):
    edit(repo, "bad", METRIC_RULE, LINK_HARM)
    output = tmp_path / "comment.md"
    code, out, err = cli("gate", "--base", "main", "--output", str(output))
    assert code == 1, out + err
    body = output.read_text()
    assert body.startswith("## Prompt gate: FAILED") and out == ""
    assert "card_agent/template_link fell" in err and "gate: FAILED" in err
    assert "card\\_agent/template\\_link" in body and "+" + LINK_HARM in body


def test_a_hand_edit_is_judged_whole_and_for_the_targets_it_is_given(cli, repo, isolated):
    """No ablation and no size limit: the rule that does nothing for the target stays in the edit
    the gate judges; `--target` sets what must improve."""
    person = "- Use person when the note is mainly about remembering someone the user met and details about them."
    edit(repo, "whole", METRIC_RULE, person)
    code, out, err = cli("gate", "--base", "main", "--target", "card_agent/template_person")
    assert "targets (named with --target): card_agent/template_person" in err
    assert "+" + METRIC_RULE in out and "+" + person in out


def test_a_change_that_edits_no_prompt_has_nothing_to_gate(cli, repo, isolated):
    git(repo, "checkout", "-q", "-b", "docs", "main")
    (repo / "README.txt").write_text("words\n")
    git(repo, "add", "README.txt")
    git(repo, "commit", "-q", "-m", "docs only")
    code, out, err = cli("gate", "--base", "main")
    assert code == 0 and "nothing to gate" in out and "nothing to gate" in err
    (repo / PROMPT).write_text((repo / PROMPT).read_text() + METRIC_RULE + "\n")  # edited, not committed
    code, out, err = cli("gate", "--base", "main")
    assert code == 0 and f"note: {PROMPT} has uncommitted changes, which are not gated" in err


@pytest.mark.parametrize("args, field", [(["--base", "no-such-branch"], "--base"),
                                         (["--base", "main", "--head", "nope"], "--head"),
                                         (["--base", "main", "--target", "template_link"], "--target"),
                                         (["--base", "main", "--target", "card_agent/no_such_bucket"], "--target")])
def test_bad_input_is_exit_2_naming_the_option(cli, repo, isolated, args, field):
    edit(repo, "some", METRIC_RULE)
    code, out, err = cli("gate", *args)
    assert code == 2, out + err
    assert field in err
    with sqlite3.connect(isolated / "optimizer.db") as db:
        ran = db.execute("select count(*) from trials").fetchone()[0]
    assert ran == 0, "checked before any trial runs"


def test_an_edit_of_an_agent_that_fails_nothing_is_not_shown_to_improve_anything(cli, repo, isolated, monkeypatch):
    """mock/oracle passes every trial: the edit has nothing to improve, so the gate does not pass it."""
    edit(repo, "perfect", METRIC_RULE)
    monkeypatch.setenv("OPTIMIZER_AGENT_MODEL", "mock/oracle")
    monkeypatch.setenv("OPTIMIZER_JUDGE_MODEL", "mock/oracle")
    code, out, err = cli("gate", "--base", "main")
    assert code == 1, out + err
    assert "card_agent: not shown to improve anything" in err and out.startswith("## Prompt gate: FAILED")
