"""The gate this project used before `optimizer.gate`, reduced to what the `previous` arm of
benchmarks/gate_power.py decides with: strict mode on capability suites (no regression suite, so
its regression veto always passed; no lenient mode; no reasons or intervals, only the verdict).

Before and after are paired: the same suite, task and trial index scored with each prompt; pairs
with an errored side are left out. Each task weighs the same in a bucket's mean, its pairs
sharing the task's weight. A patch is accepted when, in order:

1. (full stage only) no train bucket's mean fell by more than `max_bucket_drop`, nor fell with a
   one-sided paired permutation p below `alpha_harm`;
2. every targeted bucket rose with a one-sided permutation p below `alpha`, Holm-corrected across
   the targets; and (full stage only) the overall train mean did not fall and the holdout mean
   did not fall by more than `max_bucket_drop`.

The permutation test flips the sign of each non-zero pair's change: up to 16 of them the null
distribution is enumerated, beyond that 20,000 sign draws at a fixed seed, so a decision is
reproducible. The targeted stage is the early stop of the old staged rerun, taken on the target
buckets' pairs before the rest of the suites; `per_look` and `borderline` are its second look.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np
import pandas as pd

from optimizer.scoring import trial_value
from optimizer.stats import holm

EXACT_LIMIT = 16
DRAWS = 20_000
EPSILON = 1e-9


@dataclass(frozen=True)
class GateConfig:
    max_bucket_drop: float = 0.10
    alpha: float = 0.10
    alpha_harm: float = 0.20


@dataclass
class BucketChange:
    pairs: int
    change: float
    p_improve: float = 1.0
    p_harm: float = 1.0


@dataclass
class Decision:
    accepted: bool
    stage: str
    targeted: list[BucketChange]


def permutation_pvalues(diffs: np.ndarray, weights: np.ndarray, *, seed: int = 0) -> tuple[float, float]:
    """One-sided p-values (improvement, harm) of the weighted sum of paired differences."""
    observed = float(np.dot(weights, diffs))
    contributions = (weights * diffs)[diffs != 0]
    count = len(contributions)
    if count == 0:
        return 1.0, 1.0
    if count <= EXACT_LIMIT:
        grid = np.array(np.meshgrid(*([[-1.0, 1.0]] * count), indexing="ij")).reshape(count, -1).T
    else:
        grid = np.random.default_rng(seed).choice([-1.0, 1.0], size=(DRAWS, count))
    stats = grid @ contributions
    return float(np.mean(stats >= observed - EPSILON)), float(np.mean(stats <= observed + EPSILON))


def pair_trials(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Join on (suite, task_id, trial_index), without the pairs that have an errored side."""
    keys = ["suite", "task_id", "trial_index"]
    left = before.assign(value=[trial_value(score, status) for score, status in zip(before["score"], before["status"])])
    right = after.assign(value=[trial_value(score, status) for score, status in zip(after["score"], after["status"])])
    merged = left[keys + ["bucket", "split", "status", "value"]].merge(
        right[keys + ["status", "value"]], on=keys, suffixes=("_before", "_after"))
    merged = merged[merged["status_before"].ne("errored") & merged["status_after"].ne("errored")].copy()
    merged["diff"] = merged["value_after"] - merged["value_before"]
    return merged


def group_change(pairs: pd.DataFrame, *, test: bool = True) -> BucketChange:
    """The task-weighted mean change of these pairs, with its permutation p-values when `test`."""
    if pairs.empty:
        return BucketChange(0, 0.0)
    per_task = pairs.groupby(["suite", "task_id"])["diff"].transform("size")
    weights = (1.0 / (per_task * pairs.groupby(["suite", "task_id"]).ngroups)).to_numpy(dtype=float)
    change = float(np.dot(weights, pairs["value_after"])) - float(np.dot(weights, pairs["value_before"]))
    p_up, p_down = permutation_pvalues(pairs["diff"].to_numpy(dtype=float), weights) if test else (1.0, 1.0)
    return BucketChange(len(pairs), change, p_up, p_down)


def decide(before: pd.DataFrame, after: pd.DataFrame, *, targets: Iterable[tuple[str, str]],
           config: GateConfig = GateConfig(), stage: str = "full") -> Decision:
    """The verdict on two trial frames (columns of `scoring.trials_frame`); `stage="targeted"`
    judges only the improvement of the targeted buckets."""
    targets = set(targets)
    pairs = pair_trials(before, after)
    train = pairs[pairs["split"] != "holdout"]
    groups = dict(iter(train.groupby(["suite", "bucket"], sort=True)))
    targeted = [group_change(groups.get(key, train.iloc[0:0])) for key in sorted(targets)]
    adjusted = holm([bucket.p_improve for bucket in targeted])
    accepted = bool(targeted) and all(bucket.pairs and bucket.change > EPSILON and p < config.alpha
                                      for bucket, p in zip(targeted, adjusted))
    if stage != "targeted" and accepted:
        rest = [group_change(group) for key, group in groups.items() if key not in targets]
        holdout = group_change(pairs[pairs["split"] == "holdout"], test=False)
        accepted = (not any(_harmed(bucket, config) for bucket in targeted + rest)
                    and group_change(train, test=False).change >= -EPSILON
                    and not (holdout.pairs and holdout.change < -config.max_bucket_drop - EPSILON))
    return Decision(accepted, stage, targeted)


def _harmed(bucket: BucketChange, config: GateConfig) -> bool:
    return (bucket.change < -config.max_bucket_drop - EPSILON
            or (bucket.change < -EPSILON and bucket.p_harm < config.alpha_harm))


def borderline(decision: Decision) -> bool:
    """A targeted-stage rejection in which every targeted bucket rose but not yet significantly:
    the old gate then took a second look with more pairs."""
    if decision.accepted or decision.stage != "targeted":
        return False
    return bool(decision.targeted) and all(bucket.pairs and bucket.change > EPSILON for bucket in decision.targeted)


def per_look(config: GateConfig, looks: int) -> GateConfig:
    """`alpha` split evenly over `looks` looks at the same patch (Bonferroni)."""
    return replace(config, alpha=config.alpha / looks) if looks > 1 else config
