"""A trial's score: computed once from its graders' results, by the runner and by the gate alike."""

from __future__ import annotations

from optimizer.scoring import graded_score, trial_verdict, voting_passed, voting_value
from optimizer.types import GraderResult, Trial


def grader(name: str, score: float | None, passed: bool = True, *, errored: bool = False) -> GraderResult:
    return GraderResult(grader=name, score=score, passed=passed, errored=errored)


def trial_of(results: list[GraderResult]) -> Trial:
    status, score = trial_verdict(results)
    return Trial(suite="s", task_id="a1", bucket="a", split="train", index=0, status=status, score=score,
                 grader_results=results)


def test_a_trials_score_is_the_mean_of_its_applicable_graders_and_it_passes_only_if_all_passed():
    assert trial_verdict([grader("x", 0.5), grader("skipped", None, False), grader("y", 1.0)]) == ("passed", 0.75)
    assert trial_verdict([grader("x", 0.5, False), grader("y", 1.0)]) == ("failed", 0.75)
    assert trial_verdict([grader("x", None), grader("y", None, False)]) == ("passed", None)
    assert trial_verdict([grader("x", 1.0), grader("y", None, errored=True)]) == ("errored", None)


def test_the_gate_counts_the_score_the_runner_recorded_unless_it_leaves_a_judge_out():
    results = [grader("check", 1.0), grader("judge", 0.2, False), grader("other", 0.6, False)]
    recorded = trial_of(results)
    assert voting_value(recorded) == recorded.score == graded_score(results)
    assert voting_value(recorded, frozenset({"judge"})) == graded_score(results, frozenset({"judge"})) == 0.8
    assert voting_value(recorded, frozenset({"absent"})) == recorded.score


def test_a_trial_scored_only_by_judges_that_do_not_vote_or_errored_counts_for_nothing():
    assert voting_value(trial_of([grader("judge", 1.0), grader("skipped", None)]), frozenset({"judge"})) is None
    assert voting_value(trial_of([grader("check", 1.0, errored=True)])) is None


def test_a_trial_without_a_score_counts_one_or_zero_by_its_verdict():
    unscored = trial_of([grader("x", None)])
    assert voting_value(unscored) == 1.0
    assert voting_value(unscored.model_copy(update={"status": "failed"})) == 0.0


def test_a_trials_verdict_leaves_out_the_judges_that_do_not_vote():
    failed_by_judge = trial_of([grader("check", 1.0), grader("judge", 0.2, False)])
    assert failed_by_judge.status == "failed" and not voting_passed(failed_by_judge)
    assert voting_passed(failed_by_judge, frozenset({"judge"}))
    failed_by_check = trial_of([grader("check", 0.0, False), grader("judge", 1.0)])
    assert not voting_passed(failed_by_check, frozenset({"judge"}))
    assert voting_passed(trial_of([grader("check", 1.0), grader("judge", None, False)]), frozenset({"judge"}))
    assert not voting_passed(trial_of([grader("check", 1.0, errored=True)]), frozenset({"check"}))
