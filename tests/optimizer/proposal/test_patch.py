"""Patch edits, the pre-rollout checks and the hard-coding lint."""

from __future__ import annotations

import pytest

from optimizer.proposal.diffs import unified as unified_diff
from optimizer.proposal.patch import Edit, EditError, LintIndex, apply_edits, check_patch


def test_edits_apply_exactly_once_or_say_why():
    text = "alpha\nbeta\nbeta\n"
    assert apply_edits(text, [Edit("alpha\n", "alpha\ngamma\n")]) == "alpha\ngamma\nbeta\nbeta\n"
    with pytest.raises(EditError, match="not found"):
        apply_edits(text, [Edit("delta", "x")])
    with pytest.raises(EditError, match="occurs 2 times"):
        apply_edits(text, [Edit("beta", "x")])
    assert apply_edits(text, [Edit("", "- new rule")]) == "alpha\nbeta\nbeta\n- new rule\n"
    with pytest.raises(EditError, match="empty"):
        apply_edits(text, [Edit("", "  ")])


def _index() -> LintIndex:
    from optimizer.types import GraderSpec, Suite, SuiteSpec, Task, TaskInput

    task = Task(id="card_event_standup", input=TaskInput(content="Standup with the eval team Thursday 10:30am, Zoom"),
                graders=[GraderSpec(name="card_must_contain", config={"substrings": ["10:30", "zoom", "5"]}),
                         GraderSpec(name="pkm_routed_correctly", config={"expected_files": ["Areas/Health/Sleep.md"]})])
    return LintIndex.from_suites([Suite(spec=SuiteSpec(name="s", agent_name="card_agent"), root=".", tasks=[task])])


@pytest.mark.parametrize("added, found", [
    ("Treat a standup with the eval team as an event.", "eval input words"),
    ("A call on Zoom is an event.", "graded substring 'zoom'"),
    ("Sleep notes go to Areas/Health/Sleep.md.", "expected file path"),
    ("As in card_event_standup, prefer event.", "task id"),
])
def test_lint_names_what_was_copied(added, found):
    base = "# Prompt\n- event: something that happens.\n"
    diff = unified_diff(base, base + added + "\n", "p.md")
    check = check_patch(changed_files=["p.md"], allowed_file="p.md", base_prompt=base, diff=diff,
                        max_changed_lines=40, index=_index())
    assert not check.passed and check.rule == "hard_coding" and found in check.reason


def test_lint_allows_general_rules_and_text_already_in_the_base():
    base = "# Prompt\nA call on Zoom is an event.\n"
    added = ("When a note names a meeting with a concrete future time, use event; at the end of the day "
             "keep 5 of them.")
    diff = unified_diff(base, base + added + "\n", "p.md")
    check = check_patch(changed_files=["p.md"], allowed_file="p.md", base_prompt=base, diff=diff,
                        max_changed_lines=40, index=_index())
    assert check.passed, check.reason
    moved = unified_diff(base, "A call on Zoom is an event.\n# Prompt\n", "p.md")
    assert check_patch(changed_files=["p.md"], allowed_file="p.md", base_prompt=base, diff=moved,
                       max_changed_lines=40, index=_index()).passed


def test_size_and_file_checks():
    base = "x\n"
    big = unified_diff(base, base + "".join(f"line {n}\n" for n in range(41)), "p.md")
    check = check_patch(changed_files=["p.md"], allowed_file="p.md", base_prompt=base, diff=big,
                        max_changed_lines=40, index=LintIndex())
    assert check.rule == "size" and "41 added + 0 removed" in check.reason
    other = check_patch(changed_files=["p.md", "README.md"], allowed_file="p.md", base_prompt=base, diff=big,
                        max_changed_lines=40, index=LintIndex())
    assert other.rule == "files" and "README.md" in other.reason


def test_the_prompt_manuals_quote_no_evaluation_data():
    """Every request carries a manual; one that quotes a graded string or a task's words hands
    them to the patcher (the embedded model copied the card manual's counter-example, with its
    graded word, into its rule)."""
    from optimizer.proposal.patch import lint
    from optimizer.suites import load_suite
    from tests.conftest import PROJECT_ROOT

    suites = [load_suite(path.name, PROJECT_ROOT) for path in sorted((PROJECT_ROOT / "suites").iterdir())
              if (path / "suite.json").is_file()]
    index = LintIndex.from_suites(suites)
    assert "graded substring" in {label for label, _ in index.answer_keys.values()} and index.task_ids
    manuals = sorted((PROJECT_ROOT / "prompt_manual").glob("*.md"))
    assert manuals
    for manual in manuals:
        check = lint("", manual.read_text(encoding="utf-8"), index)
        assert check.passed, f"{manual.name}: {check.reason}"


def test_intervals_stay_within_what_scores_and_changes_can_be():
    from optimizer.scoring import mean_interval

    low, mean, high = mean_interval([0.0, 1.0])  # two tasks: the bare t-interval is 0.5 +- 6.4
    assert (low, mean, high) == (0.0, 0.5, 1.0)
    low, mean, high = mean_interval([-0.5, 0.75], bounds=(-1.0, 1.0))
    assert (low, high) == (-1.0, 1.0) and mean == 0.125
    low, mean, high = mean_interval([0.1, 0.2, 0.15, 0.12, 0.18], bounds=(-1.0, 1.0))
    assert -1.0 < low < mean < high < 1.0  # a tight interval is left as it is


def test_a_diffs_headers_are_neither_added_nor_removed_lines():
    from optimizer.proposal.diffs import added_lines, changed_lines, kinds, size, unified

    diff = unified("keep\n--- a rule that starts with dashes\n", "keep\n+++ three pluses\n\n", "p.md")
    assert [kind for kind, _ in kinds(diff)] == ["file", "file", "hunk", "context", "del", "add", "add"]
    added, removed = changed_lines(diff)
    assert added == ["+++ three pluses", ""] and removed == ["--- a rule that starts with dashes"]
    assert added_lines(diff) == ["+++ three pluses"] and size(diff) == 3


def test_a_line_the_watch_reverted_may_not_be_added_again():
    base = "# Prompt\n"
    index = LintIndex(reverted=frozenset({"Never use link for a web page."}))
    again = unified_diff(base, base + "  Never use link for a web page.\n", "p.md")
    check = check_patch(changed_files=["p.md"], allowed_file="p.md", base_prompt=base, diff=again,
                        max_changed_lines=40, index=index)
    assert not check.passed and check.rule == "reverted" and "Never use link" in check.reason
    other = unified_diff(base, base + "Keep every number.\n", "p.md")
    assert check_patch(changed_files=["p.md"], allowed_file="p.md", base_prompt=base, diff=other,
                       max_changed_lines=40, index=index).passed
    # a line the patch writes again only to end it with a newline (the prompt had none) is not added
    ending = "# Prompt\n- Use rating for a score."
    renewed = unified_diff(ending, ending + "\nKeep every number.\n", "p.md")
    kept = LintIndex(reverted=frozenset({"- Use rating for a score."}))
    assert "-- Use rating for a score.\n\\ No newline at end of file\n+- Use rating for a score." in renewed
    assert check_patch(changed_files=["p.md"], allowed_file="p.md", base_prompt=ending, diff=renewed,
                       max_changed_lines=40, index=kept).passed
