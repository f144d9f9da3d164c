"""The watch (`optimizer.nightly.watch`): a merged patch keeps being tested on later merging nights, and
one shown harmful is reverted by a commit that carries the evidence."""

from __future__ import annotations

import json
import sqlite3

import pytest

from optimizer import gitops
from optimizer.nightly.watch import GroupEvidence, Watched, judge, patches_in, revert_message, without_patch
from tests.end_to_end.test_nightly import nightly
from tests.helpers import DATA_LINE, FACT_RULE, LINK_HARM, PROMPT, after_data_line, git, script

HEADLINE = "card_agent: prompt patch for fact_preservation"


def merged_patch(repo, *lines: str, iteration: str = "20261120-000000-aaaaaa") -> str:
    """Commit on main a prompt patch as a merged night leaves it (the optimizer as author, its
    targets and iteration in the message); its sha."""
    prompt = repo / PROMPT
    prompt.write_text(prompt.read_text().replace(DATA_LINE, "\n".join([DATA_LINE, *lines])))
    git(repo, "add", PROMPT)
    git(repo, "-c", f"user.name={gitops.AUTHOR_NAME}", "-c", f"user.email={gitops.AUTHOR_EMAIL}", "commit", "-q",
        "-m", f"{HEADLINE}\n\nTargeted buckets: card_agent/fact_preservation\nIteration: {iteration}\n")
    return git(repo, "rev-parse", "HEAD").strip()


def test_the_optimizers_patches_are_found_and_a_patch_comes_out_of_a_later_prompt(repo):
    git(repo, "stash", "-u")
    first = merged_patch(repo, FACT_RULE)
    prompt = repo / PROMPT
    prompt.write_text(prompt.read_text() + "\n- A later line by a person.\n")
    git(repo, "commit", "-q", "-am", "a person's edit")
    found = patches_in(gitops.open_repo(repo), "HEAD", {"card_agent": PROMPT})
    assert [(p.commit, p.agent, p.targets, p.iteration_id) for p in found] == [
        (first, "card_agent", ["card_agent/fact_preservation"], "20261120-000000-aaaaaa")]
    assert patches_in(gitops.open_repo(repo), "HEAD", {"pkm_agent": "x"}) == []
    text = without_patch(gitops.open_repo(repo), "HEAD", first, PROMPT)
    assert FACT_RULE not in text and "- A later line by a person." in text and DATA_LINE in text
    # a later patch adds its line right below this one's: the three-way merge conflicts, and the
    # block comes out where it stands
    prompt.write_text(prompt.read_text().replace(FACT_RULE, f"{FACT_RULE}\n- A rule of a later night."))
    git(repo, "commit", "-q", "-am", "a later patch beside it")
    text = without_patch(gitops.open_repo(repo), "HEAD", first, PROMPT)
    assert FACT_RULE not in text and f"{DATA_LINE}\n- A rule of a later night." in text
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    # a revert commit naming it takes it off the watch
    tree = gitops.tree_with(gitops.open_repo(repo), git(repo, "rev-parse", "HEAD").strip(), PROMPT, text)
    assert FACT_RULE not in git(repo, "show", f"{tree}:{PROMPT}")
    gitops.commit_change(gitops.open_repo(repo), "main", git(repo, "rev-parse", "HEAD").strip(), tree,
                         f"Revert\n\nReverts: {first}\n")
    assert patches_in(gitops.open_repo(repo), "main", {"card_agent": PROMPT}) == []


def test_a_patch_comes_out_with_the_prompts_last_newline_kept_and_its_revert_takes_out_its_lines_alone(repo):
    """The prompt keeps its end (a revert that dropped the final newline rewrote the last line,
    which then read as reverted and refused every later patch that appended a rule)."""
    git(repo, "stash", "-u")
    first = merged_patch(repo, FACT_RULE)
    prompt = repo / PROMPT
    prompt.write_text(prompt.read_text() + "- The last rule, added later.\n")
    git(repo, "commit", "-q", "-am", "a later rule at the end")
    text = without_patch(gitops.open_repo(repo), "HEAD", first, PROMPT)
    assert text.endswith("- The last rule, added later.\n") and FACT_RULE not in text
    repository = gitops.open_repo(repo)
    tree = gitops.tree_with(repository, git(repo, "rev-parse", "HEAD").strip(), PROMPT, text)
    gitops.commit_change(repository, "main", git(repo, "rev-parse", "HEAD").strip(), tree,
                         f"Revert (optimizer watch)\n\nReverts: {first}\n")
    assert gitops.reverted_lines(repository, "main", PROMPT) == {FACT_RULE.strip()}


def test_the_watch_reverts_shows_safe_or_ends_by_the_accumulated_bets():
    entry = Watched("c" * 40, "i", HEADLINE, "card_agent", ["card_agent/fact_preservation"])
    entry.groups["card_agent/template_link"] = GroupEvidence("card_agent/template_link", [-1.0] * 12, [-1.0] * 12)
    entry.groups["holdout"] = GroupEvidence("holdout", [0.0, 0.5, -0.5] * 4, [0.0] * 12)
    entry.nights = 2
    judge(entry, {"card_agent/template_link": 150.0, "holdout": 150.0}, clear_after=16, watch_nights=10)
    assert entry.status == "revert" and "card_agent/template_link fell -1.00" in entry.reason
    message = revert_message(entry, "night-1")
    assert message.startswith(f'Revert "{HEADLINE}" (optimizer watch)') and f"Reverts: {'c' * 40}" in message
    assert "card_agent/template_link: 12 pairs, -1.00, -1.00" in message
    calm = Watched("d" * 40, "i", HEADLINE, "card_agent", [])
    calm.groups["b"] = GroupEvidence("b", [1.0, -1.0, 1.0, 1.0] * 5, [1.0, -1.0, 1.0, 1.0] * 5)
    judge(calm, {"b": 150.0}, clear_after=16, watch_nights=10)
    assert calm.status == "cleared"
    open_one = Watched("e" * 40, "i", HEADLINE, "card_agent", [])
    open_one.groups["b"] = GroupEvidence("b", [-1.0, 1.0], [0.0, 0.0])
    open_one.nights = 10
    judge(open_one, {"b": 150.0}, clear_after=16, watch_nights=10)
    assert open_one.status == "ended"
    assert Watched.from_dict(entry.as_dict()) == entry


def watch_state(store) -> list[dict]:
    with sqlite3.connect(store) as db:
        rows = [json.loads(state) for (state,) in db.execute("select state_json from nightlies order by rowid")]
    return rows[-1]["watch"]


def test_a_merged_patch_shown_harmful_is_reverted_on_main_with_its_evidence(cli, repo, isolated, tmp_path,
                                                                           monkeypatch):
    git(repo, "stash", "-u")  # a clean checkout, as a merge needs
    patch = merged_patch(repo, FACT_RULE, LINK_HARM)
    script(tmp_path, monkeypatch)  # nothing to propose: the night is its watch
    monkeypatch.setenv("OPTIMIZER_WATCH_ROUNDS", "12")
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "1", "--merge", "--patience", "1")
    assert code == 0, output
    assert summary["merged"] is True and len(summary["reverts"]) == 1, output
    (entry,) = summary["watch"]
    assert entry["commit"] == patch and entry["status"] == "reverted"
    assert "card_agent/template_link fell" in entry["reason"]
    message = git(repo, "log", "-1", "--format=%B", summary["reverts"][0])
    assert f"Reverts: {patch}" in message and "card_agent/template_link" in message and "e-value" in message
    prompt = (repo / PROMPT).read_text()
    assert LINK_HARM not in prompt and FACT_RULE not in prompt
    assert "watch: reverted" in output
    # the next night finds nothing to watch: the patch is reverted; and a proposal that brings the
    # reverted line back is refused before any trial
    script(tmp_path, monkeypatch, *[after_data_line(FACT_RULE, LINK_HARM)] * 3)  # whatever ordinal comes next
    code, summary, output = nightly(cli, tmp_path, "--date", "2026-11-24", "--max-iterations", "1", "--merge",
                                    "--patience", "1")
    assert code == 0, output
    assert summary["watch"] == [] and "watch:" not in output
    (row,) = summary["iterations"]
    assert row["status"] == "rejected" and "reverted: the patch adds again what the nightly's watch reverted" \
        in row["reason"] and LINK_HARM.strip() in row["reason"], row


def test_a_resumed_nights_watch_is_the_same_as_an_uninterrupted_one(cli, repo, isolated, tmp_path, monkeypatch):
    """The watch's pairs sit at indexes fixed by the pairs run before, and its state is saved only
    once it ended: a night interrupted right after its watch's pairs ran resumes to the same
    state as a night never interrupted (the simulator draws a trial from its seed, task, index
    and prompt), with each pair counted once."""
    import copy

    import optimizer.loop.iteration
    from optimizer.nightly.watch import run_watch

    git(repo, "stash", "-u")
    merged_patch(repo, FACT_RULE)
    script(tmp_path, monkeypatch)
    monkeypatch.setenv("OPTIMIZER_WATCH_ROUNDS", "2")
    seen = []

    def interrupted(night, **kwargs):
        run_watch(night, **kwargs)
        seen.append(copy.deepcopy([entry.as_dict() for entry in night.entries]))
        raise KeyboardInterrupt

    monkeypatch.setattr(optimizer.loop.iteration, "run_watch", interrupted)
    code, _, output = nightly(cli, tmp_path, "--max-iterations", "1", "--patience", "1", "--merge")
    assert code != 0 and seen, output
    monkeypatch.setattr(optimizer.loop.iteration, "run_watch", run_watch)
    code, resumed, output = nightly(cli, tmp_path, "--resume")
    assert code == 0, output
    (uninterrupted,) = seen
    assert resumed["watch"] == uninterrupted
    assert uninterrupted[0]["nights"] == 1 and set(uninterrupted[0]["done"].values()) == {2}


@pytest.mark.parametrize("non_voting, status", [((), "revert"), (("judge_x",), "watching")])
def test_the_watch_leaves_out_the_judges_that_do_not_vote(repo, non_voting, status):
    """With the patch every trial fails by one judge alone, every other grader passing as without
    it: the watch reverts the patch when that judge votes, and keeps watching it when the judge
    does not vote (as the gate leaves it out)."""
    from optimizer.gate import GatePolicy
    from optimizer.nightly.watch import WatchNight, run_watch
    from optimizer.suites import load_suites
    from optimizer.trials.runner import plan
    from optimizer.types import GraderResult, Trial

    git(repo, "stash", "-u")
    merged_patch(repo, FACT_RULE)
    repository = gitops.open_repo(repo)
    tip = repository.head.commit.hexsha
    entries = patches_in(repository, tip, {"card_agent": PROMPT})

    def screen(items, agent, prompt, label):
        judged = not label.endswith("without it")
        return [Trial(suite=item.suite.name, task_id=item.task.id, bucket=item.task.bucket, split=item.task.split,
                      index=item.index, status="failed" if judged else "passed", score=1.0 if not judged else 0.5,
                      grader_results=[GraderResult(grader="check", score=1.0, passed=True),
                                      GraderResult(grader="judge_x", score=0.0 if judged else 1.0,
                                                   passed=not judged)])
                for item in items]

    run_watch(WatchNight(entries, rounds=6, nights=10), repo=repository, tip=tip,
              planned=plan(load_suites(["card_agent"], repo), trials=1), prompt_paths={"card_agent": PROMPT},
              screen=screen, policy=GatePolicy(), log=lambda message: None, non_voting=non_voting)
    assert entries[0].status == status, entries[0].reason
