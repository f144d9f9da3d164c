"""The gate's statistics and rules on hand-made trial frames; patch edits and the hard-coding lint."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from optimizer.gate import GateConfig, borderline, decide, holm, per_look, permutation_pvalues
from optimizer.patch import Edit, EditError, LintIndex, apply_edits, check_patch, unified_diff

BUCKETS = {"a": ["a1", "a2"], "b": ["b1", "b2"], "h": ["h1"]}


def frame(scores: dict[str, list[float]], *, suite: str = "s", holdout: tuple[str, ...] = ("h1",)) -> pd.DataFrame:
    rows = []
    for task, values in scores.items():
        bucket = task.rstrip("0123456789")
        for index, value in enumerate(values):
            rows.append({"suite": suite, "task_id": task, "bucket": bucket,
                         "split": "holdout" if task in holdout else "train", "trial_index": index,
                         "status": "passed" if value == 1.0 else "failed", "score": value})
    return pd.DataFrame(rows)


def test_exact_permutation_pvalues():
    # three positive pairs of equal weight: only the all-plus pattern reaches the observed sum
    up, down = permutation_pvalues(np.array([1.0, 1.0, 1.0, 0.0]), np.full(4, 0.25))
    assert up == pytest.approx(1 / 8)
    assert down == pytest.approx(1.0)
    assert permutation_pvalues(np.zeros(5), np.full(5, 0.2)) == (1.0, 1.0)


def test_holm_adjustment_is_step_down_and_monotone():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_a_clear_improvement_of_the_target_is_accepted():
    before = frame({"a1": [0, 0, 0, 0], "a2": [0, 0, 1, 0], "b1": [1, 1, 1, 1], "b2": [1, 0, 1, 1], "h1": [1, 1, 1, 1]})
    after = frame({"a1": [1, 1, 1, 1], "a2": [1, 1, 1, 1], "b1": [1, 1, 1, 1], "b2": [1, 0, 1, 1], "h1": [1, 1, 1, 1]})
    decision = decide(before, after, targets={("s", "a")})
    assert decision.accepted, decision.reasons
    target = next(b for b in decision.buckets if b.bucket == "a")
    assert target.change == pytest.approx(0.875) and target.p_improve_holm < 0.01


def test_a_harmed_bucket_is_named_and_rejects():
    before = frame({"a1": [0, 0, 0, 0], "a2": [0, 0, 0, 0], "b1": [1, 1, 1, 1], "b2": [1, 1, 1, 1], "h1": [1] * 4})
    after = frame({"a1": [1, 1, 1, 1], "a2": [1, 1, 1, 1], "b1": [1, 0, 1, 1], "b2": [1, 1, 0, 1], "h1": [1] * 4})
    decision = decide(before, after, targets={("s", "a")})
    assert not decision.accepted
    harm = next(rule for rule in decision.rules if rule.rule == "no_bucket_regression")
    assert not harm.passed and "s/b fell -0.25" in harm.reason
    assert decision.mode == "strict"


def test_a_small_drop_is_tolerated_unless_significant():
    before = frame({"a1": [0] * 8, "b1": [1] * 8, "b2": [1] * 8})
    after = frame({"a1": [1] * 8, "b1": [1] * 7 + [0], "b2": [1] * 8})
    decision = decide(before, after, targets={("s", "a")})
    harm = next(rule for rule in decision.rules if rule.rule == "no_bucket_regression")
    assert harm.passed, harm.reason  # -0.0625 is within max_bucket_drop and p_harm = 0.5


def test_an_insignificant_rise_is_not_enough_but_lenient_accepts_it():
    before = frame({"a1": [0, 1, 1, 1], "b1": [1, 1, 1, 1]})
    after = frame({"a1": [1, 1, 1, 1], "b1": [1, 1, 1, 1]})
    strict = decide(before, after, targets={("s", "a")})
    assert not strict.accepted and "not significantly" in strict.summary
    lenient = decide(before, after, targets={("s", "a")}, config=GateConfig(mode="lenient"))
    assert lenient.accepted


def test_a_second_look_is_taken_only_on_a_rise_short_of_significance_at_half_the_alpha():
    gate = per_look(GateConfig(), 2)
    assert gate.alpha == pytest.approx(0.05) and per_look(GateConfig(), 1).alpha == pytest.approx(0.10)
    # 3 of 12 pairs up, none down: p = 1/8 on the first look, not below 0.05 -> look again
    before = frame({"a1": [0] * 12, "b1": [1] * 12})
    after = frame({"a1": [1, 1, 1] + [0] * 9, "b1": [1] * 12})
    first = decide(before, after, targets={("s", "a")}, config=gate, stage="targeted")
    assert not first.accepted and borderline(first)
    # twice the pairs with the same pattern: p = 1/64 < 0.05 -> accepted on the second look
    more = decide(frame({"a1": [0] * 24, "b1": [1] * 24}),
                  frame({"a1": ([1, 1, 1] + [0] * 9) * 2, "b1": [1] * 24}),
                  targets={("s", "a")}, config=gate, stage="targeted")
    assert more.accepted and not borderline(more)
    # no rise, a lenient gate, or a full-stage decision: nothing more to learn from more pairs
    flat = decide(before, before, targets={("s", "a")}, config=gate, stage="targeted")
    assert not flat.accepted and not borderline(flat)
    lenient = decide(before, after, targets={("s", "a")}, config=GateConfig(mode="lenient"), stage="targeted")
    assert not borderline(lenient)
    assert not borderline(decide(before, after, targets={("s", "a")}, config=gate))


def test_holdout_falling_beyond_the_limit_rejects():
    before = frame({"a1": [0] * 8, "h1": [1] * 8})
    after = frame({"a1": [1] * 8, "h1": [0] * 8})
    decision = decide(before, after, targets={("s", "a")})
    assert not decision.accepted and "holdout fell -1.00" in decision.summary


def test_regression_veto_and_errored_pairs():
    before = pd.concat([frame({"a1": [0] * 8}), frame({"r1": [1, 1]}, suite="reg")])
    after = pd.concat([frame({"a1": [1] * 8}), frame({"r1": [1, 0]}, suite="reg")], ignore_index=True)
    after.loc[after.index[0], "status"] = "errored"
    decision = decide(before, after, targets={("s", "a")}, regression_suites={"reg"})
    veto = decision.rules[0]
    assert veto.rule == "regression_veto" and not veto.passed and "reg/r1" in veto.reason
    assert decision.excluded_pairs == 1


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
    from optimizer.patch import lint
    from optimizer.suites import load_suite
    from tests.conftest import PROJECT_ROOT

    suites = [load_suite(path.name, PROJECT_ROOT) for path in sorted((PROJECT_ROOT / "suites").iterdir())
              if (path / "suite.json").is_file()]
    index = LintIndex.from_suites(suites)
    assert index.substrings and index.task_ids
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
