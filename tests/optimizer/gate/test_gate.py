"""The gate's statistics and decisions, on hand-made pairs and a scripted comparison."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from optimizer.comparison.compare import buckets_named, compare
from optimizer.gate import (CLEARED_BELOW, NAMED_SHARE, GatePolicy, GroupStats, PairTable, decide, groups_of,
                            harm_thresholds, named_buckets, suspicious)
from optimizer.trials.runner import PlannedTrial, plan
from optimizer.stats import (HARM_GRID, IMPROVE_GRID, anytime_p, clopper_pearson, detectable_share, evalue, holm,
                             sign_test_p, signs, wealth_path)
from optimizer.types import GraderResult, Suite, SuiteSpec, Task, Trial


# ---------------------------------------------------------------- statistics
def test_sign_bets_grow_by_the_grid_average_of_each_bet():
    path = wealth_path(signs([0.3, -0.0, 0.5, -0.2]))  # the zero change places no bet
    expected = np.mean([(1 + lam) * (1 + lam) * (1 - lam) for lam in IMPROVE_GRID])
    assert len(path) == 3 and path[-1] == pytest.approx(expected)
    assert anytime_p(signs([0.3, 0.5])) == pytest.approx(1 / np.mean([(1 + lam) ** 2 for lam in IMPROVE_GRID]))
    assert evalue([]) == 1.0 and anytime_p([]) == 1.0
    assert signs([0.2, -0.4], down=True) == [-1.0, 1.0]


def test_the_sequential_sign_test_keeps_its_level_when_looking_after_every_pair():
    rng = np.random.default_rng(7)
    alpha, sequences, looks = 0.05, 4000, 60
    changes = rng.choice([-1.0, 0.0, 1.0], size=(sequences, looks), p=[0.3, 0.4, 0.3])  # symmetric: the null
    rejected = sum(wealth_path(signs(row)).max(initial=1.0) >= 1 / alpha for row in changes)
    assert rejected / sequences <= alpha  # Ville: at most alpha however often one looks
    # the same looks at a fixed-n sign test would reject more often: repeated looks inflate it
    naive = sum(any(sign_test_p(int((row[:n] > 0).sum()), int((row[:n] < 0).sum())) < alpha
                    for n in range(5, looks + 1, 5)) for row in changes)
    assert naive / sequences > rejected / sequences


def test_the_sequential_sign_test_finds_a_clear_improvement_in_a_few_batches():
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(400):
        changes = rng.choice([-0.3, 0.0, 0.3], size=32, p=[0.05, 0.45, 0.5])
        hits += anytime_p(signs(changes)) < 0.05
    assert hits / 400 > 0.9


def test_welch_one_sided_p_matches_scipy_and_handles_no_spread():
    from scipy.stats import ttest_ind

    from optimizer.stats import welch_greater_p

    first, second = [0.9, 0.8, 1.0, 1.0], [0.5, 0.7, 0.6, 0.8, 1.0]
    expected = ttest_ind(first, second, equal_var=False, alternative="greater").pvalue
    assert welch_greater_p(first, second) == pytest.approx(expected)
    assert welch_greater_p([1.0, 1.0], [0.5, 0.5]) == 0.0 and welch_greater_p([1.0, 1.0], [1.0, 1.0]) == 1.0
    assert welch_greater_p([1.0], [0.0, 0.0]) == 1.0, "one value cannot show anything"


def test_holm_is_step_down_and_monotone():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def test_exact_intervals_and_sign_test():
    low, high = clopper_pearson(0, 10)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 10))
    low, high = clopper_pearson(5, 10)
    assert low == pytest.approx(0.1871, abs=1e-4) and high == pytest.approx(0.8129, abs=1e-4)
    assert sign_test_p(5, 0) == pytest.approx(1 / 32)
    assert sign_test_p(0, 0) == 1.0 and sign_test_p(1, 1) == pytest.approx(0.75)


def test_a_detectable_share_falls_as_pairs_grow():
    shares = [detectable_share(n, threshold=130) for n in (4, 16, 64, 256)]
    assert shares[0] == 1.0 and shares == sorted(shares, reverse=True) and shares[-1] < 0.4


# ---------------------------------------------------------------- decisions on hand-made pairs
def trial(task: str, index: int, score: float, *, bucket: str | None = None, split: str = "train",
          suite: str = "s", status: str | None = None, graders: list[GraderResult] | None = None) -> Trial:
    return Trial(suite=suite, task_id=task, bucket=bucket or task.rstrip("0123456789"), split=split, index=index,
                 status=status or ("passed" if score == 1.0 else "failed"), score=score,
                 grader_results=graders or [])


def table_of(pairs: dict[str, list[tuple[float, float]]], **kwargs) -> PairTable:
    table = PairTable(kwargs.pop("non_voting", ()))
    for task, values in pairs.items():
        for index, (before, after) in enumerate(values):
            table.add(trial(task, index, before, **kwargs), trial(task, index, after, **kwargs))
    return table


def test_a_clear_improvement_with_nothing_harmed_is_accepted():
    table = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 1)] * 8, "c1": [(0.5, 0.5)] * 8})
    decision = decide(table, targets={("s", "a")})
    assert decision.accepted, decision.reasons
    target = next(b for b in decision.buckets if b.bucket == "a")
    assert target.verdict == "improved" and target.change == pytest.approx(1.0) and target.p_improve < 0.05
    assert {b.bucket: b.verdict for b in decision.buckets if not b.targeted} == {
        "b": "no harm found", "c": "no harm found", "non-target (pooled)": "no harm found"}


def test_a_significant_drop_anywhere_rejects_and_is_named():
    table = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 0)] * 14, "c1": [(1, 1)] * 8})
    decision = decide(table, targets={("s", "a")})
    assert not decision.accepted
    harm = next(rule for rule in decision.rules if rule.rule == "no_harm")
    assert not harm.passed and "s/b fell -1.00, significant" in harm.reason
    assert next(b for b in decision.buckets if b.bucket == "b").verdict == "harmed"


def test_noise_in_untouched_buckets_does_not_veto():
    # a few drops and rises in b (no net harm), a couple of drops in c: not significant across the family
    table = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 0), (0, 1), (1, 0), (1, 1)], "c1": [(1, 0), (1, 0), (1, 1)]})
    decision = decide(table, targets={("s", "a")})
    assert decision.accepted, decision.reasons
    c = next(b for b in decision.buckets if b.bucket == "c")
    assert c.change < -0.5 and c.verdict == "not shown safe" and c.mde > 0.10  # said, not hidden


def test_the_harm_threshold_is_bonferroni_over_the_groups_tested():
    # eight straight drops: p = 1/E about 0.02 -- significant alone at 0.10, not over 13 groups
    # (12 buckets and all of them pooled)
    drops = {"b1": [(1, 0)] * 8}
    alone = decide(table_of({"a1": [(0, 1)] * 10, **drops}), targets={("s", "a")})
    assert not alone.accepted
    many = table_of({"a1": [(0, 1)] * 10, **drops, **{f"x{i}_1": [(1, 1)] * 8 for i in range(11)}})
    decision = decide(many, targets={("s", "a")}, policy=GatePolicy(refuse_beyond_margin=False))
    rule = next(rule for rule in decision.rules if rule.rule == "no_harm")
    assert rule.numbers["groups"] == 13 and rule.numbers["evalue_threshold"] == pytest.approx(130)
    assert rule.passed
    # by default the eight drops are refused all the same: their interval lies below the margin
    rule = next(rule for rule in decide(many, targets={("s", "a")}).rules if rule.rule == "no_harm")
    assert not rule.passed and "s/b fell -1.00, its 95% interval [-1.00, -1.00] wholly below -0.10 (8 pairs)" in rule.reason


def test_a_drop_whose_interval_lies_below_the_margin_is_refused_though_its_evalue_falls_short():
    """As on the embedded model: a one-task bucket fell 0.96 -> 0.54 over 13 pairs, its e-value
    just short of the Bonferroni threshold over 14 groups; the interval [-0.59, -0.26] is wholly
    below -max_bucket_drop, so the decision refuses and the row's verdict is *beyond margin*. With fewer than `margin_min_pairs` pairs, or
    an interval reaching above the margin, it does not."""
    others = {f"x{i}_1": [(1, 1)] * 8 for i in range(12)}
    fell = [(1, 0)] * 4 + [(1, 0.5)] * 4 + [(1, 1)] * 3 + [(0.5, 0.5)] * 2
    table = table_of({"a1": [(0, 1)] * 10, "b1": fell, **others})
    off = decide(table, targets={("s", "a")}, policy=GatePolicy(refuse_beyond_margin=False))
    b = next(row for row in off.buckets if row.bucket == "b")
    assert off.accepted and b.verdict != "harmed" and b.pairs == 13 and b.ci_high < -0.10
    decision = decide(table, targets={("s", "a")})
    rule = next(rule for rule in decision.rules if rule.rule == "no_harm")
    assert not decision.accepted and not rule.passed and "s/b fell" in rule.reason and "wholly below -0.10" in rule.reason
    assert next(row.verdict for row in decision.buckets if row.bucket == "b") == "beyond margin"  # the table says why
    assert b.verdict == "not shown safe"

    short = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 0)] * 3, **others})
    assert decide(short, targets={("s", "a")}).accepted  # 3 equal drops: no interval to refuse on
    mixed = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 0), (0, 1), (1, 0)] * 3 + [(1, 1)] * 4, **others})
    row = next(row for row in decide(mixed, targets={("s", "a")}).buckets if row.bucket == "b")
    assert row.ci_high > -0.10 and decide(mixed, targets={("s", "a")}).accepted


def test_a_bucket_is_named_by_a_word_of_its_own_name_in_a_changed_line():
    buckets = {("card", name) for name in ("template_mood", "template_metric", "fact_preservation", "multi_fact_day")}
    assert named_buckets(["Do not use mood for how the user feels."], buckets) == {("card", "template_mood")}
    assert named_buckets(["Record metrics with their unit."], buckets) == {("card", "template_metric")}  # plural
    # `template` and `fact` are in two names each: they name neither; `moody` is another word
    assert named_buckets(["Pick the template that keeps every fact.", "A moody note"], buckets) == set()
    assert named_buckets(["One card per day."], buckets) == {("card", "multi_fact_day")}
    assert named_buckets(["mood"], {("other", "template_mood")} | buckets) == {("card", "template_mood"),
                                                                             ("other", "template_mood")}


def test_a_patch_names_the_buckets_of_its_changed_lines_but_not_the_ones_it_was_asked_to_change():
    planned = planned_items({"mood": 1, "metric": 2, "quote": 1})
    diff = "--- a/p.md\n+++ b/p.md\n@@ -1 +1,2 @@\n-Keep quotes short.\n+Record a metric with its unit.\n+Mood is x.\n"
    assert buckets_named(diff, planned, "card_agent") == {("s", "mood"), ("s", "metric"), ("s", "quote")}
    assert buckets_named(diff, planned, "card_agent", asked={("s", "metric")}) == {("s", "mood"), ("s", "quote")}
    assert buckets_named(diff, planned, "pkm_agent") == set(), "another agent's buckets"


def test_named_buckets_get_half_the_harm_level_and_the_family_keeps_alpha_harm():
    drops = {"b1": [(1, 0)] * 8}  # p = 1/E about 0.02: not significant among 13 groups at Bonferroni
    table = table_of({"a1": [(0, 1)] * 10, **drops, **{f"x{i}_1": [(1, 1)] * 8 for i in range(11)}})
    policy = GatePolicy(name_weighting=True, refuse_beyond_margin=False)  # the e-value tests alone
    plain = decide(table, targets={("s", "a")}, policy=policy)
    named = decide(table, targets={("s", "a")}, named={("s", "b")}, policy=policy)
    assert plain.accepted and not named.accepted
    assert decide(table, targets={("s", "a")}, named={("s", "b")}, policy=GatePolicy(refuse_beyond_margin=False)).accepted, \
        "weighting is off by default"
    weighted = decide(table, targets={("s", "a")}, named={("s", "x0_")}, policy=policy)
    rule = next(r for r in weighted.rules if r.rule == "no_harm")
    assert rule.passed and "half of it on s/x0_, which the patch names" in rule.reason
    assert rule.numbers["named"] == ["s/x0_"]
    assert "s/b fell -1.00, significant" in next(r for r in named.rules if r.rule == "no_harm").reason
    thresholds = harm_thresholds(groups_of(table, {("s", "a")}, {("s", "b")}), policy)
    assert sorted(thresholds)[0] == pytest.approx(1 / (NAMED_SHARE * policy.alpha_harm))  # the named one: 20
    assert sorted(thresholds)[1:] == pytest.approx([12 / ((1 - NAMED_SHARE) * policy.alpha_harm)] * 12)
    assert sum(1 / value for value in thresholds) == pytest.approx(policy.alpha_harm)
    every = {("s", "b")} | {("s", f"x{i}_") for i in range(11)}
    assert sum(1 / v for v in harm_thresholds(groups_of(table, {("s", "a")}, every), policy)) == \
        pytest.approx(policy.alpha_harm)


def test_the_weighted_harm_thresholds_keep_the_false_veto_rate_under_alpha_harm():
    rng = np.random.default_rng(11)
    policy = GatePolicy(name_weighting=True)
    table = table_of({"a1": [(0, 1)]} | {f"g{i}_1": [(1, 1)] for i in range(12)})
    thresholds = np.array(harm_thresholds(groups_of(table, {("s", "a")}, {("s", "g0_")}), policy))
    assert thresholds.min() == pytest.approx(20)
    runs, vetoes = 3000, 0
    for _ in range(runs):  # no harm anywhere: every group's changes are symmetric
        changes = rng.choice([-1.0, 0.0, 1.0], size=(len(thresholds), 48), p=[0.25, 0.5, 0.25])
        wealth = [wealth_path(signs(row, down=True), HARM_GRID).max(initial=1.0) for row in changes]
        vetoes += any(np.array(wealth) >= thresholds)
    assert vetoes / runs <= policy.alpha_harm


def test_an_insignificant_rise_is_not_enough_but_lenient_accepts_it():
    table = table_of({"a1": [(0, 1), (1, 1), (1, 1), (0, 1)], "b1": [(1, 1)] * 4})
    strict = decide(table, targets={("s", "a")})
    assert not strict.accepted and "not significantly" in strict.summary
    assert decide(table, targets={("s", "a")}, policy=GatePolicy(mode="lenient")).accepted


def test_several_targets_must_each_improve_at_alpha_with_no_adjustment():
    """An intersection-union test: a second target leaves the first one's p-value as it is, and
    the candidate passes only when both are below alpha. At 7 pairs each p is 0.039, which Holm
    over two targets would have doubled past alpha."""
    both = {"a1": [(0, 1)] * 7, "b1": [(0, 1)] * 7}
    one = decide(table_of(both), targets={("s", "a")}, stage="targeted")
    two = decide(table_of(both), targets={("s", "a"), ("s", "b")}, stage="targeted")
    p_one = next(b for b in one.buckets if b.bucket == "a").p_improve
    p_two = next(b for b in two.buckets if b.bucket == "a").p_improve
    assert p_two == pytest.approx(p_one) and 0.025 < p_one < 0.05
    assert two.rules[0].passed
    only_a = decide(table_of({"a1": [(0, 1)] * 7, "b1": [(1, 1)] * 7}), targets={("s", "a"), ("s", "b")},
                    stage="targeted")
    assert not only_a.rules[0].passed and "s/b did not improve" in only_a.rules[0].reason


def test_judges_that_do_not_vote_leave_a_bucket_unjudged():
    judge = [GraderResult(grader="judge_x", score=0.0, passed=False)]
    judged_up = [GraderResult(grader="judge_x", score=1.0, passed=True)]
    table = PairTable(non_voting=["judge_x"])
    for index in range(10):
        table.add(trial("a1", index, 0.0, graders=judge), trial("a1", index, 1.0, graders=judged_up))
    decision = decide(table, targets={("s", "a")})
    assert not decision.accepted and "unjudged" in decision.summary and decision.non_voting == ["judge_x"]
    # with a voting grader beside it, only the voting grader's score counts
    mixed = PairTable(non_voting=["judge_x"])
    check_fail = GraderResult(grader="check", score=0.0, passed=False)
    check_pass = GraderResult(grader="check", score=1.0, passed=True)
    for index in range(10):
        mixed.add(trial("a1", index, 0.0, graders=judged_up + [check_fail]),
                  trial("a1", index, 0.5, graders=judge + [check_pass]))
    row = next(b for b in decide(mixed, targets={("s", "a")}).buckets if b.bucket == "a")
    assert row.before == 0.0 and row.after == 1.0


def test_a_judge_that_does_not_vote_flips_no_verdict_in_the_pass_fail_bets():
    """A candidate whose trials fail only by a non-voting judge, every voting grader passing as
    before, is not a pass-rate collapse: the pass/fail flips leave that judge out as the scores do."""
    check = [GraderResult(grader="check", score=1.0, passed=True)]
    judge_pass = [GraderResult(grader="judge_x", score=1.0, passed=True)]
    judge_fail = [GraderResult(grader="judge_x", score=0.0, passed=False)]
    table = table_of({"a1": [(0, 1)] * 12}, non_voting=["judge_x"])
    for index in range(16):
        table.add(trial("b1", index, 1.0, graders=check + judge_pass),
                  trial("b1", index, 0.5, status="failed", graders=check + judge_fail))
    decision = decide(table, targets={("s", "a")})
    row = next(b for b in decision.buckets if b.bucket == "b")
    assert row.before == row.after == 1.0 and row.verdict != "harmed", row
    assert all(pair.before_passed and pair.after_passed for pair in table.pairs[("s", "b1")])
    voting = table_of({"a1": [(0, 1)] * 12})
    for index in range(16):
        voting.add(trial("b1", index, 1.0, graders=check + judge_pass),
                   trial("b1", index, 0.5, status="failed", graders=check + judge_fail))
    harmed = next(b for b in decide(voting, targets={("s", "a")}).buckets if b.bucket == "b")
    assert harmed.verdict == "harmed", "the same judge, voting, shows the collapse"


def test_errored_pairs_are_left_out_and_a_candidate_that_errors_more_is_rejected():
    table = table_of({"a1": [(0, 1)] * 10})
    for index in range(10, 18):
        table.add(trial("a1", index, 0.0), trial("a1", index, 0.0, status="errored"))
    decision = decide(table, targets={("s", "a")})
    assert decision.excluded_pairs == 8 and not decision.accepted
    rule = next(rule for rule in decision.rules if rule.rule == "errored")
    assert not rule.passed and "without a score on 8 pair(s) (8 errored, 0 past the deadline" in rule.reason


# ---------------------------------------------------------------- the comparison procedure
def planned_items(buckets: dict[str, int], trials: int = 4, lone_task_factor: int = 1) -> list[PlannedTrial]:
    suite = Suite.model_construct(spec=SuiteSpec(name="s", agent_name="card_agent"), root=".", tasks=[])
    items = []
    for bucket, count in buckets.items():
        for number in range(count):
            task = Task.model_construct(id=f"{bucket}{number}", metadata={"failure_bucket": bucket, "split": "train"})
            total = trials * (lone_task_factor if count == 1 else 1)
            items += [PlannedTrial(suite, task, index, reserve=index >= trials) for index in range(total)]
    return items


class ScriptedSides:
    """Pass probabilities per bucket for each prompt; every trial an independent draw."""

    def __init__(self, base: dict[str, float], candidate: dict[str, float], seed: int = 0):
        self.rates = {"base": base, "candidate": candidate}
        self.rng = random.Random(seed)
        self.count = 0
        self.labels: list[str] = []

    def _draw(self, side: str, planned: list[PlannedTrial]) -> list[Trial]:
        self.count += len(planned)
        return [trial(item.task.id, item.index, float(self.rng.random() < self.rates[side][item.task.bucket]))
                for item in planned]

    def base(self, planned, label):
        self.labels.append(label)
        self.base_run = getattr(self, "base_run", []) + [(item.task.id, item.index) for item in planned]
        return self._draw("base", planned)

    def candidate(self, planned, label):
        return self._draw("candidate", planned)

    def ran(self) -> int:
        return self.count


def test_compare_stops_a_clear_improvement_early_then_checks_every_bucket():
    planned = planned_items({"a": 1, "b": 2, "c": 1})
    sides = ScriptedSides({"a": 0.1, "b": 0.6, "c": 0.6}, {"a": 0.95, "b": 0.6, "c": 0.6})
    baseline = sides._draw("base", planned)
    sides.count = 0
    result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent")
    assert result.decision.stage == "full"
    target = next(b for b in result.decision.buckets if b.bucket == "a")
    assert target.verdict == "improved" and target.pairs < GatePolicy().max_target_pairs
    c = next(b for b in result.decision.buckets if b.bucket == "c")
    assert c.pairs >= GatePolicy().min_bucket_pairs  # the one-task bucket got fresh pairs beyond its 4
    assert result.rollouts == sides.ran() <= GatePolicy().max_rollouts


def test_compare_rejects_a_patch_that_does_nothing_without_running_the_rest():
    planned = planned_items({"a": 1, "b": 2})
    sides = ScriptedSides({"a": 0.5, "b": 0.6}, {"a": 0.5, "b": 0.6}, seed=4)
    baseline = sides._draw("base", planned)
    result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent")
    assert not result.decision.accepted and result.decision.stage == "targeted"
    assert "rest" not in sides.labels and "harm check" not in sides.labels


def test_compare_keeps_within_the_rollout_budget():
    planned = planned_items({"a": 1, "b": 1, "c": 1, "d": 1})
    sides = ScriptedSides({k: 0.5 for k in "abcd"}, {"a": 0.9, "b": 0.2, "c": 0.2, "d": 0.2}, seed=1)
    baseline = sides._draw("base", planned)
    sides.count = 0
    policy = GatePolicy(max_rollouts=60)
    result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent",
                     policy=policy)
    assert result.rollouts <= 60


def test_each_target_after_the_first_adds_to_the_rollout_budget():
    planned = planned_items({"a": 1, "b": 1, "c": 1, "d": 1})
    spent = []
    for targets in ({("s", "a")}, {("s", "a"), ("s", "b")}):
        sides = ScriptedSides({k: 0.5 for k in "abcd"}, {"a": 0.95, "b": 0.95, "c": 0.3, "d": 0.3}, seed=1)
        baseline = sides._draw("base", planned)
        sides.count = 0
        policy = GatePolicy(max_rollouts=60, extra_target_rollouts=40)
        assert policy.budget(len(targets)) == 60 + 40 * (len(targets) - 1)
        result = compare(sides, planned=planned, baseline=baseline, targets=targets, agent="card_agent",
                         policy=policy)
        assert result.rollouts <= policy.budget(len(targets))
        spent.append(result.rollouts)
    assert spent[1] > 60, "two targets may spend past max_rollouts"


def test_compare_a_harmful_patch_is_caught_on_a_one_task_bucket():
    planned = planned_items({"a": 1, "b": 1, "c": 2, "d": 2})
    caught = 0
    for seed in range(40):
        sides = ScriptedSides({"a": 0.2, "b": 0.6, "c": 0.6, "d": 0.6}, {"a": 0.95, "b": 0.05, "c": 0.6, "d": 0.6},
                              seed=seed)
        baseline = sides._draw("base", planned)
        sides.count = 0
        result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent")
        caught += not result.decision.accepted
    assert caught >= 36


def test_a_bucket_the_patch_names_gets_twice_the_floor_of_pairs():
    planned = planned_items({"a": 1, "b": 1, "c": 1})
    pairs = {}
    for named in (set(), {("s", "b")}):
        sides = ScriptedSides({"a": 0.1, "b": 1.0, "c": 1.0}, {"a": 0.95, "b": 1.0, "c": 1.0})
        baseline = sides._draw("base", planned)
        result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent",
                         named=named, policy=GatePolicy(name_weighting=True))
        assert result.decision.accepted, result.decision.reasons
        pairs[bool(named)] = {row.bucket: row.pairs for row in result.decision.buckets}
    floor = GatePolicy().min_bucket_pairs
    assert pairs[False]["b"] == pairs[False]["c"] == floor  # nothing moved: no group asked for more
    assert pairs[True]["b"] == 2 * floor and pairs[True]["c"] == floor


def test_a_task_alone_in_its_train_bucket_gets_its_own_trial_count():
    tasks = [Task.model_construct(id=f"{bucket}{number}", metadata={"failure_bucket": bucket, "split": split})
             for bucket, number, split in (("a", 0, "train"), ("b", 0, "train"), ("b", 1, "train"),
                                           ("c", 0, "holdout"))]
    suite = Suite.model_construct(spec=SuiteSpec(name="s", agent_name="card_agent"), root=".", tasks=tasks)
    counts = {}
    for item in plan([suite], trials=4, lone_task_factor=3):
        counts[item.task.id] = counts.get(item.task.id, 0) + 1
    assert counts == {"a0": 12, "b0": 4, "b1": 4, "c0": 4}  # a holdout task is tested with its split
    reserve = {(item.task.id, item.index) for item in plan([suite], trials=4, lone_task_factor=3) if item.reserve}
    assert reserve == {("a0", index) for index in range(4, 12)}
    assert {item.task.id for item in plan([suite], trials=4) if item.index >= 4} == set()


def test_compare_fits_a_smaller_last_batch_of_target_pairs_into_the_budget():
    planned = planned_items({"a": 2, "b": 2})
    sides = ScriptedSides({"a": 0.5, "b": 0.6}, {"a": 0.62, "b": 0.6}, seed=3)
    baseline = sides._draw("base", planned)
    sides.count = 0
    policy = GatePolicy(max_rollouts=64, min_bucket_pairs=0)  # 8 for the rest: 28 target pairs fit, not 32
    result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent",
                     policy=policy)
    target = next(b for b in result.decision.buckets if b.bucket == "a")
    assert target.pairs == 28 and result.decision.capped
    assert result.rollouts <= 64


def test_a_lone_tasks_reserve_is_paired_only_for_a_harm_check_and_before_any_fresh_base_trial():
    planned = planned_items({"a": 1, "b": 2, "c": 1}, lone_task_factor=3)
    # c's 12 baseline trials: the rest pairs 4, the harm floor 4 more from the reserve, no base trial run
    sides = ScriptedSides({"a": 0.1, "b": 0.6, "c": 0.6}, {"a": 0.95, "b": 0.6, "c": 0.6}, seed=2)
    baseline = sides._draw("base", planned)
    sides.count = 0
    result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent")
    assert result.decision.stage == "full"
    c = next(b for b in result.decision.buckets if b.bucket == "c")
    assert c.pairs >= GatePolicy().min_bucket_pairs
    assert not [key for key in sides.base_run if key[0] == "c0" and key[1] < 12]
    # a patch that breaks c: its pairs use all 8 reserve trials before the base prompt runs c again
    for seed in range(10):
        sides = ScriptedSides({"a": 0.1, "b": 0.6, "c": 0.6}, {"a": 0.95, "b": 0.6, "c": 0.05}, seed=seed)
        baseline = sides._draw("base", planned)
        sides.count = 0
        result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent")
        c = next(b for b in result.decision.buckets if b.bucket == "c")
        fresh_c = sorted(index for task, index in getattr(sides, "base_run", []) if task == "c0")
        assert fresh_c == list(range(12, 12 + len(fresh_c)))
        assert not fresh_c or c.pairs == 12 + len(fresh_c)


class FixedSides(ScriptedSides):
    """Every trial passes except those listed per side as (task, index)."""

    def __init__(self, failing: dict[str, set[tuple[str, int]]]):
        super().__init__({}, {})
        self.failing = failing

    def _draw(self, side: str, planned: list[PlannedTrial]) -> list[Trial]:
        self.count += len(planned)
        return [trial(item.task.id, item.index, float((item.task.id, item.index) not in self.failing[side]))
                for item in planned]


class ScoredSides(ScriptedSides):
    """Each trial's score per side by (task, index); the candidate's defaults to the base's, the
    base's to 1.0 (a trial passes at 1.0 only)."""

    def __init__(self, base: dict[tuple[str, int], float], candidate: dict[tuple[str, int], float]):
        super().__init__({}, {})
        self.scores = {"base": base, "candidate": candidate}

    def _draw(self, side: str, planned: list[PlannedTrial]) -> list[Trial]:
        self.count += len(planned)
        key = lambda item: (item.task.id, item.index)  # noqa: E731
        return [trial(item.task.id, item.index, self.scores[side].get(key(item), self.scores["base"].get(key(item), 1.0)))
                for item in planned]


def test_the_harm_group_that_fell_most_gets_the_next_pairs():
    # after the floor (8 pairs each): c fell 0.50 (five drops, one rise), b 0.375 (three drops);
    # b's bets on a drop hold more wealth (4.4 against 4.0), but c fell more, so c is checked first
    planned = planned_items({"a": 1, "b": 1, "c": 1, "d": 2})
    sides = FixedSides({"base": {("a0", i) for i in range(64)} | {("c0", 1)},
                        "candidate": {("b0", i) for i in (0, 3, 6)} | {("c0", i) for i in (0, 2, 3, 4, 6)}})
    baseline = sides._draw("base", planned)
    sides.count = 0
    lines: list[str] = []
    compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent", log=lines.append)
    checks = [line.split(":")[1].strip() for line in lines if line.startswith("harm check:") and "min_bucket_pairs" not in line]
    assert checks[:1] == ["c"]
    # a patch that names b: b fell too, so it is checked before c, which fell more
    lines.clear()
    sides.count = 0
    compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent", log=lines.append,
            named={("s", "b")}, policy=GatePolicy(name_weighting=True))
    checks = [line.split(":")[1].strip() for line in lines if line.startswith("harm check:") and "min_bucket_pairs" not in line]
    assert checks[:1] == ["b"]


@pytest.mark.parametrize("signs_seen, leaning", [([1.0], True), ([1.0, -1.0], True), ([], False),
                                                 ([-1.0, -1.0], False)])
def test_a_harm_group_gets_more_pairs_until_its_drop_bets_lose_half(signs_seen, leaning):
    diffs = [-s for s in signs_seen]  # a drop test bets on negative changes
    stats = GroupStats(1, len(diffs), 0.5, 0.5, 0.0, [], diffs, unjudged=False)
    assert suspicious(stats) == leaning
    assert leaning == (stats.harm_wealth > CLEARED_BELOW and bool(diffs))


def test_the_sign_bets_keep_their_level_exactly_over_every_sign_sequence():
    # every one of the 2^14 equally likely sign sequences under the null: the chance that the
    # wealth ever reaches 1/alpha, counted exactly, is at most alpha (Ville)
    import itertools

    for grid in (IMPROVE_GRID, HARM_GRID):
        for alpha in (0.05, 0.10):
            reached = sum(wealth_path(list(signs), grid).max() >= 1 / alpha
                          for signs in itertools.product((-1.0, 1.0), repeat=14))
            assert reached / 2 ** 14 <= alpha


def test_uncalibrated_judges_do_not_vote_until_calibrated_and_the_request_says_so(tmp_path):
    from optimizer.trials.calibration import CALIBRATION_BAR
    from optimizer.trials.evaluate import non_voting_graders
    from optimizer.trials.judging import get_judge
    from optimizer.registry import get_grader
    from optimizer.proposal.request import Selection, Target, render_request
    from optimizer.store import Store
    from optimizer.suites import load_suite
    from tests.helpers import PROJECT_ROOT

    store = Store(f"sqlite:///{tmp_path}/s.db")
    suite = load_suite("pkm_agent", PROJECT_ROOT)
    flagged = non_voting_graders(store, [suite], "mock/sim")
    judged = {get_grader(name).judge for name in flagged}
    assert flagged and None not in judged  # every PKM judge grader, none of the checks
    for name in judged:
        judge = get_judge(name)
        wording = judge.wording_hash(judge.form_for("mock/sim"))
        store.calibrations.record(judge=name, model="mock/sim", rubric_hash=wording,
                                  spearman=CALIBRATION_BAR + 0.1, agreement=0.9, examples=10, errored=0, rows=[])
    assert non_voting_graders(store, [suite], "mock/sim") == []
    assert non_voting_graders(store, [suite], "local/other") == flagged  # calibration is per model

    from optimizer.proposal.request import load_manual

    selection = Selection("pkm_agent", ["pkm_agent"], [Target("pkm_agent", "skip_trivial", 2, 4, 0.5)], [])
    text, _ = render_request(selection=selection, failures=[], prompt="p", prompt_file="agents/prompts/pkm_agent.md",
                             manual=load_manual(PROJECT_ROOT, "pkm_agent"), iteration_id="i", base_commit="c" * 40,
                             agent_model="m", max_changed_lines=40, token_budget=12000, non_voting=flagged,
                             judge_model="mock/sim")
    assert f"Not counted by the gate: the verdicts of {', '.join(flagged)}" in text


# ---------------------------------------------------------------- harm checks that do not depend on wording
def test_the_harm_bets_average_the_score_sign_bets_and_the_pass_fail_flip_bets():
    # pair 1: score -0.1 and a pass lost; pair 2: score +0.2, no verdict changed; pair 3: a tie
    stats = GroupStats(1, 3, 0.5, 0.5, 0.0, [], [-0.1, 0.2, 0.0], unjudged=False, flips=[-1.0, 0.0, 0.0])
    scores = [(1.5 + 1.75) / 2, (1.5 * 0.5 + 1.75 * 0.25) / 2]  # bets on a drop: +1 then -1
    flips = [(1.5 + 1.75) / 2] * 2  # +1 then a tie
    assert stats.moved == 2
    assert stats.harm_evalue == pytest.approx((scores[0] + flips[0]) / 2)  # 1.625
    assert stats.harm_wealth == pytest.approx((scores[1] + flips[1]) / 2)  # 1.109375


def test_a_collapse_of_the_pass_rate_that_partial_credit_hides_is_shown_harmed():
    # b: every passing trial now fails with 0.9 credit, every failing one gains 0.05: the mean score
    # barely moves and the score signs split evenly, but ten passes were lost and none gained
    b_pairs = [(1.0, 0.9), (0.2, 0.25)] * 10
    decision = decide(table_of({"a1": [(0, 1)] * 10, "b1": b_pairs}), targets={("s", "a")})
    b = next(row for row in decision.buckets if row.bucket == "b")
    assert -0.05 < b.change < 0 and b.verdict == "harmed"
    assert not decision.accepted


def test_a_harm_spread_too_thin_for_any_one_bucket_is_shown_by_the_pooled_group():
    # six buckets lose 3 of 8 pairs each: far from any bucket's threshold (70), clear in all 48 together
    spread = {f"x{i}_1": [(1, 0)] * 3 + [(1, 1)] * 5 for i in range(6)}
    decision = decide(table_of({"a1": [(0, 1)] * 10, **spread}), targets={("s", "a")})
    verdicts = {row.bucket: row.verdict for row in decision.buckets if not row.targeted}
    assert verdicts.pop("non-target (pooled)") == "harmed"
    assert set(verdicts.values()) == {"no harm found"} or "harmed" not in verdicts.values()
    assert not decision.accepted
    # the reason names the bucket that fell most inside the pooled group, not the pooled group alone
    assert re.search(r"non-target \(pooled\) fell -0\.\d\d, significant \(p=[\d.]+, 48 pairs\) \(of its buckets "
                     r"s/x\d_ fell most, -0\.38 over 8 pairs\)", decision.summary), decision.summary


def test_a_spread_harm_is_rejected_by_compare():
    planned = planned_items({"a": 1, "b": 2, "c": 2, "d": 2, "e": 2, "f": 2})
    base = {"a": 0.2, "b": 0.6, "c": 0.6, "d": 0.6, "e": 0.6, "f": 0.6}
    harmful = {**base, "a": 0.95, "b": 0.35, "c": 0.35, "d": 0.35}  # -0.25 on three buckets
    caught = 0
    for seed in range(40):
        sides = ScriptedSides(base, harmful, seed=seed)
        baseline = sides._draw("base", planned)
        sides.count = 0
        result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent")
        caught += not result.decision.accepted
    assert caught >= 30  # the gate before the pooled group and the pass/fail bets: 28


def test_a_harm_worded_to_name_another_bucket_is_caught_as_one_naming_nothing():
    planned = planned_items({"a": 1, "b": 2, "c": 2, "d": 2})
    base = {"a": 0.2, "b": 0.6, "c": 0.6, "d": 0.6}
    harmful = {**base, "a": 0.95, "b": 0.25}
    outcomes = {}
    for named in ((), {("s", "c")}):
        accepted = []
        for seed in range(30):
            sides = ScriptedSides(base, harmful, seed=seed)
            baseline = sides._draw("base", planned)
            sides.count = 0
            result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent",
                             named=named)
            accepted.append(result.decision.accepted)
        outcomes[bool(named)] = accepted
    assert outcomes[True] == outcomes[False]  # the wording moves neither level nor pairs
    assert sum(outcomes[True]) <= 7


# ---------------------------------------------------------------- merge or propose
def test_an_open_group_whose_pass_rate_fell_makes_an_accept_a_proposal_though_its_mean_held():
    # b: six of twelve passes lost with 0.9 credit kept, six failures gained 0.05: the mean score
    # barely moves and b's own harm test is at p = 0.099, short of the four groups' threshold
    # (p = 0.025), but the pass rate fell by half
    others = {"c1": [(1, 1)] * 8, "d1": [(0.5, 0.5)] * 8}
    decision = decide(table_of({"a1": [(0, 1)] * 10, "b1": [(1.0, 0.9), (0.2, 0.25)] * 6, **others}),
                      targets={("s", "a")})
    b = next(row for row in decision.buckets if row.bucket == "b")
    assert decision.accepted and b.verdict == "not shown safe", decision.reasons
    assert -0.05 < b.change < 0 and b.pass_change == pytest.approx(-0.5) and 0.025 < b.p_harm < 0.10
    assert decision.verdict == "propose"
    assert any(group.startswith("s/b (") and "pass rate -0.50" in group for group in decision.open_groups)
    assert decision.as_dict()["verdict"] == "propose"
    # the same fall on fewer pairs (p = 0.26): within what noise gives, merged (and watched)
    fewer = decide(table_of({"a1": [(0, 1)] * 10, "b1": [(1.0, 0.9), (0.2, 0.25)] * 3, **others}),
                   targets={("s", "a")})
    assert fewer.accepted and fewer.verdict == "merge" and fewer.open_groups


def test_an_open_group_that_held_level_is_merged_unless_every_open_group_is_to_be_proposed():
    # b moved both ways and held its mean and pass rate: open (too few pairs), not leaning
    table = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 0), (0, 1), (1, 0), (0, 1)], "c1": [(1, 1)] * 8})
    decision = decide(table, targets={("s", "a")})
    b = next(row for row in decision.buckets if row.bucket == "b")
    assert decision.accepted and b.verdict == "not shown safe" and b.fell == 0, decision.reasons
    assert decision.verdict == "merge"
    assert decide(table, targets={("s", "a")}, policy=GatePolicy(propose_open="any")).verdict == "propose"
    assert decide(table, targets={("s", "a")}, policy=GatePolicy(mode="lenient")).verdict == "propose"
    rejected = decide(table_of({"a1": [(0, 0)] * 10, "b1": [(1, 1)] * 8}), targets={("s", "a")})
    assert not rejected.accepted and rejected.verdict == ""


def test_a_group_whose_pass_rate_fell_most_gets_the_next_harm_pairs_though_its_mean_fell_less():
    planned = planned_items({"a": 1, "b": 1, "c": 1, "d": 2})
    # b: four of eight passes lost (score 1 -> 0.8: mean -0.10, pass rate -0.50); c: its mean fell
    # 0.15 (0.5 -> 0.0 and 0.5 -> 0.7 in turn) with no pass lost
    sides = ScoredSides(base={("a0", i): 0.0 for i in range(64)} | {("b0", i): 1.0 for i in range(64)}
                        | {("c0", i): 0.5 for i in range(64)},
                        candidate={("a0", i): 1.0 for i in range(64)} | {("b0", i): 0.8 for i in (0, 2, 4, 6)}
                        | {("c0", i): 0.0 if i % 2 == 0 else 0.7 for i in range(64)})
    baseline = sides._draw("base", planned)
    lines: list[str] = []
    compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent", log=lines.append)
    checks = [line.split(":")[1].strip() for line in lines if line.startswith("harm check:") and "min_bucket_pairs" not in line]
    assert checks[:1] == ["b"], lines


def _safety_runs(base: dict, candidate: dict, planned, safety: int, seeds: range) -> list[tuple]:
    """(verdict or rejected, trials, whether the safety stage ran) per seed."""
    outcomes = []
    for seed in seeds:
        sides = ScriptedSides(base, candidate, seed=seed)
        baseline = sides._draw("base", planned)
        sides.count = 0
        notes: list[str] = []
        result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent",
                         policy=GatePolicy(safety_rollouts=safety), log=notes.append)
        decision = result.decision
        outcomes.append((decision.verdict if decision.accepted else "rejected", result.rollouts,
                         any("(safety stage)" in note for note in notes)))
    return outcomes


def test_the_safety_stage_turns_chance_leanings_into_merges_and_only_leaning_accepts_pay_for_it():
    """A good patch that harms nothing: the accepts whose groups lean by chance when the budget is
    spent get more pairs on those groups, which then drift back; a merge runs exactly what it ran
    without the stage (a candidate the margin check rejects at the end may have leaned, and paid)."""
    planned = planned_items({"a": 2, "b": 2, "c": 2, "d": 2, "e": 2, "f": 2, "g": 2})
    base = {"a": 0.3, **{bucket: 0.6 for bucket in "bcdefg"}}
    good = {**base, "a": 0.9}
    without = _safety_runs(base, good, planned, 0, range(60))
    with_stage = _safety_runs(base, good, planned, 100, range(60))
    merged = (sum(v == "merge" for v, _, _ in without), sum(v == "merge" for v, _, _ in with_stage))
    assert merged[1] > merged[0], merged
    for (verdict, trials, _), (_, staged_trials, staged) in zip(without, with_stage):
        if verdict == "merge":
            assert (staged_trials, staged) == (trials, False), "a candidate that leans nowhere pays nothing"
    assert any(staged for _, _, staged in with_stage)
    assert max(trials for _, trials, _ in with_stage) <= GatePolicy().max_rollouts + 100


def test_the_safety_stage_shows_a_real_harm_rather_than_merging_it():
    planned = planned_items({"a": 2, "b": 2, "c": 2, "d": 2})
    base = {"a": 0.3, "b": 0.9, "c": 0.6, "d": 0.6}
    harmful = {**base, "a": 0.9, "b": 0.6}  # b falls 0.30
    without = _safety_runs(base, harmful, planned, 0, range(40))
    with_stage = _safety_runs(base, harmful, planned, 100, range(40))
    merged = (sum(v == "merge" for v, _, _ in without), sum(v == "merge" for v, _, _ in with_stage))
    rejected = (sum(v == "rejected" for v, _, _ in without), sum(v == "rejected" for v, _, _ in with_stage))
    assert merged[1] <= merged[0] and rejected[1] >= rejected[0], (merged, rejected)


def test_an_accept_whose_holdout_fell_is_proposed_though_its_harm_test_is_quiet():
    table = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 1)] * 8})
    for index, (before, after) in enumerate([(1, 0), (1, 1), (1, 1), (0, 0), (1, 1), (1, 0), (1, 1), (0, 1)]):
        table.add(trial("h1", index, before, bucket="b", split="holdout"),
                  trial("h1", index, after, bucket="b", split="holdout"))
    harm = decide(table, targets={("s", "a")}, policy=GatePolicy(holdout_rule="harm"))
    assert harm.accepted and harm.holdout["pass_change"] == pytest.approx(-1 / 8), harm.reasons
    assert harm.holdout["verdict"] != "harmed" and harm.verdict == "merge"  # a fall of one pair: noise to the test
    no_fall = decide(table, targets={("s", "a")})  # the default
    assert no_fall.accepted and no_fall.verdict == "propose"
    assert any(group.startswith("holdout (") for group in no_fall.open_groups), no_fall.open_groups
    held = table_of({"a1": [(0, 1)] * 10, "b1": [(1, 1)] * 8})
    for index in range(8):
        held.add(trial("h1", index, 1, bucket="b", split="holdout"), trial("h1", index, 1, bucket="b", split="holdout"))
    assert decide(held, targets={("s", "a")}, policy=GatePolicy(holdout_rule="no_fall")).verdict == "merge"
