"""The gate this project used before `optimizer.gate` (kept for benchmarks/gate_power.py, which
measures both side by side). Its text below is as it was.

The gate: does a candidate prompt beat the baseline, bucket by bucket, with no regressions?

Before and after are paired: the same suites, tasks, trial indexes, seeds and models, only the
prompt differs. A *pair* is one (suite, task, trial index) scored both times; pairs where either
side errored are left out (and counted). A task's change is the mean of its pairs' score
changes; a bucket's change is the mean of its tasks' changes.

Rules, strict mode (the default), in order:

1. **Regression veto.** Every task of a regression suite that passed all its trials before must
   pass all its trials after.
2. **No bucket regression.** For every bucket of the capability suites (train split): the mean
   change is not below `-max_bucket_drop`, and a drop is not significant (one-sided paired
   permutation test, p < `alpha_harm`).
3. **Improvement.** Every targeted bucket improves: one-sided paired permutation test at `alpha`,
   Holm-corrected across the targeted buckets; the overall train score does not fall; the holdout
   split does not fall by more than `max_bucket_drop`.

Lenient mode applies the plain rule: some bucket mean up, no bucket mean down, and the veto.

The permutation test flips the sign of each pair's change (under the null hypothesis that the
prompt change does nothing, before and after are exchangeable within a pair) and recomputes the
bucket statistic, the mean task change. Flipping single pairs rather than whole tasks is what
makes the test usable on buckets of one or two tasks: with k tasks a task-level test can never
go below p = 1/2^k, so a two-task bucket could never pass at alpha = 0.10, whatever the patch.
Up to 16 non-zero pairs the null distribution is enumerated exactly; beyond that it is sampled
(20,000 draws, fixed seed), so a decision is reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal

import numpy as np
import pandas as pd

from optimizer.scoring import mean_interval, trial_value
from optimizer.stats import holm

GateMode = Literal["strict", "lenient"]
EXACT_LIMIT = 16
DRAWS = 20_000
EPSILON = 1e-9


@dataclass(frozen=True)
class GateConfig:
    mode: GateMode = "strict"
    max_bucket_drop: float = 0.10
    alpha: float = 0.10
    alpha_harm: float = 0.20


@dataclass
class BucketChange:
    suite: str
    bucket: str
    tasks: int
    pairs: int
    before: float
    after: float
    change: float
    p_improve: float
    p_harm: float
    targeted: bool = False
    p_improve_holm: float | None = None
    ci_low: float = math.nan
    ci_high: float = math.nan
    """95% t-interval of the mean task change (NaN with fewer than two tasks)."""

    def as_dict(self) -> dict[str, Any]:
        return {key: (None if isinstance(value, float) and math.isnan(value) else value)
                for key, value in self.__dict__.items()}


@dataclass
class RuleResult:
    rule: str
    passed: bool
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Decision:
    accepted: bool
    mode: GateMode
    stage: str
    rules: list[RuleResult]
    buckets: list[BucketChange]
    overall: dict[str, float]
    holdout: dict[str, float]
    excluded_pairs: int

    @property
    def reasons(self) -> list[str]:
        return [f"{'pass' if rule.passed else 'FAIL'} {rule.rule}: {rule.reason}" for rule in self.rules]

    @property
    def summary(self) -> str:
        failed = [rule for rule in self.rules if not rule.passed]
        if not failed:
            return "accepted: " + "; ".join(rule.reason for rule in self.rules if rule.rule == "improvement")
        return "rejected: " + "; ".join(f"{rule.rule}: {rule.reason}" for rule in failed)

    def as_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "mode": self.mode, "stage": self.stage, "summary": self.summary,
                "rules": [rule.__dict__ for rule in self.rules],
                "buckets": [bucket.as_dict() for bucket in self.buckets],
                "overall": self.overall, "holdout": self.holdout, "excluded_pairs": self.excluded_pairs}


# ---------------------------------------------------------------- statistics
def permutation_pvalues(diffs: np.ndarray, weights: np.ndarray, *, seed: int = 0) -> tuple[float, float]:
    """One-sided p-values (improvement, harm) of the weighted sum of paired differences."""
    observed = float(np.dot(weights, diffs))
    moving = diffs != 0
    contributions = (weights * diffs)[moving]
    count = len(contributions)
    if count == 0:
        return 1.0, 1.0
    if count <= EXACT_LIMIT:
        grid = np.array(np.meshgrid(*([[-1.0, 1.0]] * count), indexing="ij")).reshape(count, -1).T
    else:
        rng = np.random.default_rng(seed)
        grid = rng.choice([-1.0, 1.0], size=(DRAWS, count))
    stats = grid @ contributions  # zero pairs contribute nothing whatever their sign
    p_up = float(np.mean(stats >= observed - EPSILON))
    p_down = float(np.mean(stats <= observed + EPSILON))
    return p_up, p_down


# ---------------------------------------------------------------- pairing
def pair_trials(before: pd.DataFrame, after: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Join on (suite, task_id, trial_index); drop pairs with an errored side (returned count)."""
    keys = ["suite", "task_id", "trial_index"]
    left = before.assign(value=[trial_value(score, status) for score, status in zip(before["score"], before["status"])])
    right = after.assign(value=[trial_value(score, status) for score, status in zip(after["score"], after["status"])])
    merged = left[keys + ["bucket", "split", "status", "value"]].merge(
        right[keys + ["status", "value"]], on=keys, suffixes=("_before", "_after"))
    usable = merged["status_before"].ne("errored") & merged["status_after"].ne("errored")
    merged = merged[usable].copy()
    merged["diff"] = merged["value_after"] - merged["value_before"]
    return merged, int((~usable).sum())


def _weights(pairs: pd.DataFrame) -> np.ndarray:
    """Each task weighs the same; its pairs share the task's weight."""
    per_task = pairs.groupby(["suite", "task_id"])["diff"].transform("size")
    tasks = pairs.groupby(["suite", "task_id"]).ngroups
    return (1.0 / (per_task * tasks)).to_numpy(dtype=float)


def group_change(pairs: pd.DataFrame, suite: str, bucket: str, *, targeted: bool = False) -> BucketChange:
    if pairs.empty:
        return BucketChange(suite, bucket, 0, 0, math.nan, math.nan, 0.0, 1.0, 1.0, targeted)
    weights = _weights(pairs)
    before = float(np.dot(weights, pairs["value_before"]))
    after = float(np.dot(weights, pairs["value_after"]))
    p_up, p_down = permutation_pvalues(pairs["diff"].to_numpy(dtype=float), weights)
    low, _, high = mean_interval(pairs.groupby(["suite", "task_id"])["diff"].mean().tolist(), bounds=(-1.0, 1.0))
    return BucketChange(suite, bucket, pairs.groupby(["suite", "task_id"]).ngroups, len(pairs),
                        before, after, after - before, p_up, p_down, targeted, ci_low=low, ci_high=high)


# ---------------------------------------------------------------- the gate
def decide(before: pd.DataFrame, after: pd.DataFrame, *, targets: Iterable[tuple[str, str]],
           regression_suites: Iterable[str] = (), config: GateConfig = GateConfig(),
           stage: str = "full") -> Decision:
    """Apply the gate to two trial frames (columns of `scoring.trials_frame`).

    `stage="targeted"` evaluates only the improvement of the targeted buckets: the early stop of
    a staged rerun, taken before the rest of the suites are spent on a patch that cannot pass.
    """
    targets = set(targets)
    regression_suites = set(regression_suites)
    pairs, excluded = pair_trials(before, after)
    capability = pairs[~pairs["suite"].isin(regression_suites)]
    train = capability[capability["split"] != "holdout"]
    holdout = capability[capability["split"] == "holdout"]

    buckets = [group_change(group, suite, bucket, targeted=(suite, bucket) in targets)
               for (suite, bucket), group in train.groupby(["suite", "bucket"], sort=True)]
    for suite, bucket in sorted(targets - {(b.suite, b.bucket) for b in buckets}):
        buckets.append(group_change(train.iloc[0:0], suite, bucket, targeted=True))
    targeted = [bucket for bucket in buckets if bucket.targeted]
    for bucket, adjusted in zip(targeted, holm([bucket.p_improve for bucket in targeted])):
        bucket.p_improve_holm = adjusted
    overall = _summary(group_change(train, "*", "*"))
    holdout_change = _summary(group_change(holdout, "*", "holdout"))

    rules: list[RuleResult] = []
    if stage != "targeted":
        rules.append(_veto(pairs[pairs["suite"].isin(regression_suites)], before, after, regression_suites))
    if config.mode == "lenient":
        if stage == "targeted":
            rules.append(_lenient_targets(targeted))
        else:
            rules.append(_lenient(buckets))
    else:
        if stage != "targeted":
            rules.append(_no_regression(buckets, config))
        rules.append(_improvement(targeted, config, overall if stage != "targeted" else None,
                                  holdout_change if stage != "targeted" else None))
    return Decision(accepted=all(rule.passed for rule in rules), mode=config.mode, stage=stage, rules=rules,
                    buckets=buckets, overall=overall, holdout=holdout_change, excluded_pairs=excluded)


def borderline(decision: Decision) -> bool:
    """A strict stage-1 rejection in which every targeted bucket rose but not yet significantly:
    more pairs could settle it (see the loop's second look)."""
    if decision.accepted or decision.mode != "strict" or decision.stage != "targeted":
        return False
    targeted = [bucket for bucket in decision.buckets if bucket.targeted]
    return bool(targeted) and all(bucket.pairs and bucket.change > EPSILON for bucket in targeted)


def per_look(config: GateConfig, looks: int) -> GateConfig:
    """The gate for each of `looks` looks at the same patch: `alpha` split evenly (Bonferroni), so
    the chance that some look accepts a patch that does nothing stays within `alpha`."""
    return replace(config, alpha=config.alpha / looks) if looks > 1 else config


def _summary(change: BucketChange) -> dict[str, float]:
    return {"before": change.before, "after": change.after, "change": change.change,
            "tasks": change.tasks, "pairs": change.pairs}


def _veto(pairs: pd.DataFrame, before: pd.DataFrame, after: pd.DataFrame, suites: set[str]) -> RuleResult:
    if not suites:
        return RuleResult("regression_veto", True, "no regression suite in this run")
    scope_before = before[before["suite"].isin(suites)]
    scope_after = after[after["suite"].isin(suites)]
    was_green = [key for key, group in scope_before.groupby(["suite", "task_id"])
                 if len(group) and group["status"].eq("passed").all()]
    broken = []
    for key in was_green:
        group = scope_after[(scope_after["suite"] == key[0]) & (scope_after["task_id"] == key[1])]
        if group.empty or not group["status"].eq("passed").all():
            broken.append(f"{key[0]}/{key[1]}")
    if broken:
        return RuleResult("regression_veto", False, f"regression task(s) no longer pass: {', '.join(broken)}",
                          {"broken": broken, "checked": len(was_green)})
    return RuleResult("regression_veto", True, f"all {len(was_green)} previously passing regression task(s) "
                                               f"still pass", {"checked": len(was_green)})


def _no_regression(buckets: list[BucketChange], config: GateConfig) -> RuleResult:
    harmed = []
    for bucket in buckets:
        if bucket.change < -config.max_bucket_drop - EPSILON:
            harmed.append(f"{bucket.suite}/{bucket.bucket} fell {bucket.change:+.2f} "
                          f"(limit -{config.max_bucket_drop:.2f})")
        elif bucket.change < -EPSILON and bucket.p_harm < config.alpha_harm:
            harmed.append(f"{bucket.suite}/{bucket.bucket} fell {bucket.change:+.2f}, significant "
                          f"(p={bucket.p_harm:.3f} < {config.alpha_harm})")
    numbers = {"max_bucket_drop": config.max_bucket_drop, "alpha_harm": config.alpha_harm,
               "harmed": harmed}
    if harmed:
        return RuleResult("no_bucket_regression", False, "; ".join(harmed), numbers)
    return RuleResult("no_bucket_regression", True, f"no bucket fell by more than {config.max_bucket_drop:.2f} "
                                                    f"or significantly", numbers)


def _improvement(targeted: list[BucketChange], config: GateConfig, overall: dict | None,
                 holdout: dict | None) -> RuleResult:
    problems, wins = [], []
    for bucket in targeted:
        label = f"{bucket.suite}/{bucket.bucket}"
        if bucket.pairs == 0:
            problems.append(f"{label} has no scored pairs")
        elif bucket.change <= EPSILON:
            problems.append(f"{label} did not improve ({bucket.before:.2f} -> {bucket.after:.2f})")
        elif bucket.p_improve_holm >= config.alpha:
            problems.append(f"{label} rose {bucket.change:+.2f} but not significantly "
                            f"(Holm p={bucket.p_improve_holm:.3f} >= {config.alpha})")
        else:
            wins.append(f"{label} {bucket.before:.2f} -> {bucket.after:.2f} (Holm p={bucket.p_improve_holm:.3f})")
    if not targeted:
        problems.append("no bucket was targeted")
    if overall is not None and overall["change"] < -EPSILON:
        problems.append(f"overall train score fell {overall['change']:+.3f}")
    if holdout is not None and holdout["pairs"] and holdout["change"] < -config.max_bucket_drop - EPSILON:
        problems.append(f"holdout fell {holdout['change']:+.2f} (limit -{config.max_bucket_drop:.2f})")
    numbers = {"alpha": config.alpha, "overall": overall, "holdout": holdout,
               "targeted": [bucket.as_dict() for bucket in targeted]}
    if problems:
        return RuleResult("improvement", False, "; ".join(problems), numbers)
    return RuleResult("improvement", True, "; ".join(wins), numbers)


def _lenient(buckets: list[BucketChange]) -> RuleResult:
    up = [f"{b.suite}/{b.bucket}" for b in buckets if b.change > EPSILON]
    down = [f"{b.suite}/{b.bucket} {b.change:+.2f}" for b in buckets if b.change < -EPSILON]
    if down:
        return RuleResult("lenient", False, f"bucket mean(s) fell: {', '.join(down)}", {"up": up, "down": down})
    if not up:
        return RuleResult("lenient", False, "no bucket mean rose", {"up": up, "down": down})
    return RuleResult("lenient", True, f"rose: {', '.join(up)}; none fell", {"up": up, "down": down})


def _lenient_targets(targeted: list[BucketChange]) -> RuleResult:
    if any(bucket.change > EPSILON for bucket in targeted):
        return RuleResult("lenient", True, "a targeted bucket rose")
    return RuleResult("lenient", False, "no targeted bucket rose")
