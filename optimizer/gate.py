"""The gate: does a candidate prompt beat the base prompt on its targets, and harm nothing?

The gate judges *pairs*: a (suite, task, trial index) run once with each prompt. `PairTable`
collects them as `optimizer.compare` runs batches; `decide` turns a table into a `Decision`.
docs/gate.md gives the methods, the reasons for them and their measured error rates.

A bucket's change is the mean over its tasks of each task's mean pair change (tasks weigh the
same). Its tests are sequential sign tests by betting (`optimizer.stats`): under the null
hypothesis that the patch changes nothing, the two trials of a pair are exchangeable, so each
non-zero change is as likely up as down; the test bets on the signs of the changes in the order
the pairs were run, and stays valid however many batches are added and whenever it stops.

Strict mode (the default):

1. **Improvement.** Every targeted bucket improves: its anytime-valid p-value is below `alpha`
   (an intersection-union test: no adjustment for several targets). Only fresh trials count
   here (the baseline's trials chose the targets, and would favour any patch by regression to
   the mean).
2. **No harm.** For every other train bucket of the changed agent, the holdout split, all of
   those together (`POOLED`: a harm spread thin over several buckets) and each regression suite,
   a one-sided betting test of a drop, betting on the signs of the score changes and of the
   pass/fail flips at once (`GroupStats._harm_path`). A group is *harmed* when
   its wealth reaches its threshold: m / `alpha_harm` (m = groups tested: Bonferroni over
   e-values, so the chance that noise vetoes a patch that harms nothing is at most `alpha_harm`
   in all), or, with `name_weighting` on and a patch that names some of the buckets
   (`named_buckets`), a weighted Bonferroni that spends `NAMED_SHARE` of `alpha_harm` on those
   (`harm_thresholds`). A group still
   open when the comparison ends (some pair changed and its drop bets have not lost half their
   stake, see `suspicious`), whose detectable drop is larger than `max_bucket_drop`, is reported
   as *not shown safe*; with `refuse_unsafe` it rejects. A group's bets falling to
   `CLEARED_BELOW` clear it only once it has `clear_after` pairs.
3. **Errored trials.** Pairs with an errored side are left out; the candidate is rejected when it
   errors significantly more often than the base prompt on the same pairs (exact sign test at
   `alpha_harm`). A trial the infrastructure spoiled (`scoring.spoiled`: a slow or silent model
   server) leaves its pair out and counts for neither prompt here.

Every group reports its pairs, change, a 95% t-interval over its rounds (descriptive), verdict,
and the drop its harm test could detect at the pairs used (80% power). Graders listed as
*non-voting* (LLM judges not calibrated on the judge model in use) are left out of the values;
a group whose trials only such graders scored is *unjudged* and can neither improve nor harm.

Lenient mode applies the plain rule: some bucket mean up, no bucket mean down.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

import numpy as np

from optimizer.scoring import mean_interval, spoiled, voting_value
from optimizer.stats import HARM_GRID, anytime_p, detectable_share, sign_test_p, signs, wealth_path
from optimizer.types import Trial

GateMode = Literal["strict", "lenient"]
EPSILON = 1e-9
FUTILE_AFTER = 16
"""Pairs after which a targeted bucket whose mean change is not above zero stops (futility)."""
CLEARED_BELOW = 0.5
"""A harm group whose bets on a drop fall to this wealth is cleared: the evidence favours no drop
two to one (the lower boundary of Wald's sequential probability ratio test; the upper one is
the group's harm threshold)."""
NAMED_SHARE = 0.5
"""Share of `alpha_harm` spent on the buckets a patch names, when it names some but not all
(`harm_thresholds`): a change is likeliest to break the behaviour its own words are about."""
WORD = re.compile(r"[a-z]+")


@dataclass(frozen=True)
class GatePolicy:
    """The gate's levels and the comparison's pair budget (settings of the same names)."""

    mode: GateMode = "strict"
    alpha: float = 0.05
    alpha_harm: float = 0.10
    max_bucket_drop: float = 0.10
    batch_pairs: int = 8
    max_target_pairs: int = 64
    min_bucket_pairs: int = 8
    max_bucket_pairs: int = 48
    max_rollouts: int = 250
    extra_target_rollouts: int = 50
    clear_after: int = 16
    """Pairs a harm group needs before its bets falling to `CLEARED_BELOW` clear it: two unlucky
    first pairs no longer end the checks of a bucket that a patch broke."""
    refuse_unsafe: str = "never"
    """Reject when a group is *not shown safe* at the end (the budget spent with it open):
    `never`, `pooled` (only the pooled group of all non-target tasks) or `any` group."""
    name_weighting: bool = False
    """Weight the harm tests toward the buckets a patch names (`harm_thresholds`). Off: a harm
    worded to name another bucket moved half of `alpha_harm` and the pairs to an innocent one
    (docs/gate.md); kept for `benchmarks/gate_power.py --arms weighted`."""

    def budget(self, targets: int) -> int:
        """Trials a proposal with this many targeted buckets may run: `max_rollouts`, plus
        `extra_target_rollouts` for each target after the first (each needs improvement pairs of
        its own; without them the harm checks would get only what the targets left)."""
        return self.max_rollouts + self.extra_target_rollouts * max(0, targets - 1)


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
    ci_low: float = math.nan
    ci_high: float = math.nan
    verdict: str = ""
    """improved | not shown | futile | harmed | no harm found | not shown safe | unjudged"""
    mde: float = math.nan
    """The drop the harm test detects with 80% probability at these pairs (NaN under 2 rounds)."""
    kind: str = "bucket"
    """bucket | holdout | overall | regression (overall is descriptive: not tested)"""

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
    rollouts: int = 0
    """Trials the comparison ran for this decision (both prompts; cached base trials excluded)."""
    capped: bool = False
    """The pair budget (`max_rollouts`) ended the comparison before every test was settled."""
    non_voting: list[str] = field(default_factory=list)
    """Graders left out of the values: LLM judges not calibrated on the judge model in use."""

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
                "overall": self.overall, "holdout": self.holdout, "excluded_pairs": self.excluded_pairs,
                "rollouts": self.rollouts, "capped": self.capped, "non_voting": self.non_voting}


# ---------------------------------------------------------------- pairs
@dataclass
class Pair:
    order: int
    """When the pair was added: the tests read the changes in this order."""
    index: int
    before: float | None
    after: float | None
    before_errored: bool
    after_errored: bool
    spoiled: bool = False
    before_passed: bool = False
    after_passed: bool = False
    """A side was spoiled by the infrastructure (`scoring.spoiled`): left out, and not held
    against either prompt by the errored rule."""

    @property
    def usable(self) -> bool:
        return self.before is not None and self.after is not None

    @property
    def diff(self) -> float:
        return self.after - self.before


@dataclass(frozen=True)
class TaskKey:
    suite: str
    task_id: str
    bucket: str
    split: str
    regression: bool = False


class PairTable:
    """The pairs collected so far, by task."""

    def __init__(self, non_voting: Iterable[str] = ()):
        self.non_voting = frozenset(non_voting)
        self.tasks: dict[tuple[str, str], TaskKey] = {}
        self.pairs: dict[tuple[str, str], list[Pair]] = {}
        self.added = 0

    def add(self, before: Trial, after: Trial, *, regression: bool = False) -> None:
        key = (before.suite, before.task_id)
        self.tasks.setdefault(key, TaskKey(before.suite, before.task_id, before.bucket, before.split, regression))
        self.added += 1
        self.pairs.setdefault(key, []).append(Pair(
            self.added, before.index, voting_value(before, self.non_voting), voting_value(after, self.non_voting),
            before.status == "errored", after.status == "errored", spoiled(before) or spoiled(after),
            before.status == "passed", after.status == "passed"))

    def add_all(self, before: Iterable[Trial], after: Iterable[Trial], regression: set[str] = frozenset()) -> int:
        """Pair trials by (suite, task, index); returns how many pairs were added. Pairs are added
        in (suite, task, index) order, not the order trials finished in, so the tests (which read
        changes in the order they were added) do not depend on scheduling or on a resume."""
        by_key = {(t.suite, t.task_id, t.index): t for t in before}
        added = 0
        for trial in sorted(after, key=lambda t: (t.suite, t.task_id, t.index)):
            match = by_key.get((trial.suite, trial.task_id, trial.index))
            if match is not None:
                self.add(match, trial, regression=trial.suite in regression)
                added += 1
        return added

    def count(self, key: tuple[str, str]) -> int:
        return len(self.pairs.get(key, []))

    def keys(self, *, suite: str | None = None, bucket: str | None = None, split: str | None = None,
             regression: bool | None = None) -> list[tuple[str, str]]:
        return sorted(key for key, task in self.tasks.items()
                      if (suite is None or task.suite == suite) and (bucket is None or task.bucket == bucket)
                      and (split is None or task.split == split)
                      and (regression is None or task.regression == regression))

    def errored_counts(self) -> tuple[int, int, int]:
        """(pairs with an errored side, candidate-only errored, base-only errored); a spoiled pair
        counts in the first only: a slow machine says nothing of either prompt."""
        pairs = [pair for group in self.pairs.values() for pair in group]
        judged = [pair for pair in pairs if not pair.spoiled]
        return (sum(1 for p in pairs if p.before_errored or p.after_errored),
                sum(1 for p in judged if p.after_errored and not p.before_errored),
                sum(1 for p in judged if p.before_errored and not p.after_errored))


@dataclass
class GroupStats:
    tasks: int
    pairs: int
    before: float
    after: float
    change: float
    rounds: list[float]
    """Round r: the mean over tasks of each task's r-th pair change (for the interval)."""
    diffs: list[float]
    """Every usable pair's change, in the order the pairs were run (for the tests)."""
    unjudged: bool
    flips: list[float] | None = None
    """Per usable pair, in the same order: +1 when only the candidate's trial passed, -1 when
    only the base prompt's did, else 0 (None: not known, the harm test bets on `diffs` alone)."""

    @property
    def p_improve(self) -> float:
        return anytime_p(signs(self.diffs))

    @functools.cached_property
    def _harm_path(self) -> np.ndarray:
        """The wealth of the bets on a drop after each pair that moved (computed once): the
        average of the sign bets on the score changes and the sign bets on the pass/fail flips
        (McNemar's discordant pairs), both read in pair order. Each is a test martingale under
        exchangeability, so their average is one too; the flips see a collapse of the pass rate
        that partial credit dilutes in the scores, the scores a loss of credit that flips no
        verdict."""
        scores = [-1.0 if d > 1e-12 else 1.0 if d < -1e-12 else 0.0 for d in self.diffs]
        if self.flips is None:
            moved = [value for value in scores if value]
            return wealth_path(moved, HARM_GRID)
        flips = [-value for value in self.flips]
        keep = [i for i, (a, b) in enumerate(zip(scores, flips)) if a or b]
        if not keep:
            return np.ones(0)
        return (wealth_path([scores[i] for i in keep], HARM_GRID)
                + wealth_path([flips[i] for i in keep], HARM_GRID)) / 2

    @property
    def harm_evalue(self) -> float:
        return float(max(1.0, self._harm_path.max())) if self._harm_path.size else 1.0

    @property
    def moved(self) -> int:
        """Pairs whose change is not zero (the ones the sign bets bet on)."""
        return int(self._harm_path.size)

    @property
    def harm_wealth(self) -> float:
        return float(self._harm_path[-1]) if self._harm_path.size else 1.0

    def detectable_drop(self, threshold: float) -> float:
        """The mean drop the harm test detects with 80% probability at these pairs, if changes
        keep the size seen so far (NaN when no pair changed or fewer than two pairs)."""
        moved = [abs(d) for d in self.diffs if abs(d) > 1e-12]
        if len(self.diffs) < 2 or not moved:
            return math.nan
        share = detectable_share(len(moved), threshold)
        return min(1.0, share * sum(moved) / len(self.diffs))


def group_stats(table: PairTable, keys: list[tuple[str, str]]) -> GroupStats:
    """A group's task-weighted before/after means and its rounds (see the module docstring)."""
    usable = {key: [p for p in table.pairs.get(key, []) if p.usable] for key in keys}
    scored = [key for key in keys if usable[key]]
    total = sum(len(table.pairs.get(key, [])) for key in keys)
    if not scored:
        judged = any(p.before_errored or p.after_errored for key in keys for p in table.pairs.get(key, []))
        return GroupStats(len(keys), 0, math.nan, math.nan, 0.0, [], [], unjudged=total > 0 and not judged)
    before = sum(sum(p.before for p in usable[k]) / len(usable[k]) for k in scored) / len(scored)
    after = sum(sum(p.after for p in usable[k]) / len(usable[k]) for k in scored) / len(scored)
    depth = min(len(usable[k]) for k in scored)
    rounds = [sum(usable[k][r].diff for k in scored) / len(scored) for r in range(depth)]
    ordered = sorted((p for k in scored for p in usable[k]), key=lambda p: p.order)
    flips = [float(p.after_passed) - float(p.before_passed) for p in ordered]
    return GroupStats(len(scored), sum(len(usable[k]) for k in scored), before, after, after - before, rounds,
                      [pair.diff for pair in ordered], unjudged=False, flips=flips)


def _change(suite: str, bucket: str, stats: GroupStats, *, kind: str = "bucket",
            targeted: bool = False) -> BucketChange:
    low, _, high = mean_interval(stats.rounds, bounds=(-1.0, 1.0)) if len(stats.rounds) >= 2 else (
        math.nan, math.nan, math.nan)
    return BucketChange(suite, bucket, stats.tasks, stats.pairs, stats.before, stats.after, stats.change,
                        stats.p_improve, min(1.0, 1.0 / stats.harm_evalue), targeted, ci_low=low, ci_high=high,
                        kind=kind, verdict="unjudged" if stats.unjudged else "")


# ---------------------------------------------------------------- groups and tests
@dataclass
class Groups:
    """What the gate tests: the targeted buckets (improvement) and the harm family."""

    targets: list[tuple[str, str]]
    harm: list[tuple[str, str, str, list[tuple[str, str]]]]
    """(suite, label, kind, task keys) per group tested for harm."""
    named: frozenset[tuple[str, str]] = frozenset()
    """(suite, bucket) of the train buckets the patch names (`named_buckets`)."""


KIND_ORDER = {"bucket": 0, "holdout": 1, "pooled": 2, "regression": 3}
POOLED = ("*", "non-target (pooled)", "pooled")
"""The harm group of every non-target train task and holdout task of the changed agent together:
a harm spread thin over several buckets, too small in each to show there, adds up in it."""


def harm_group(suite: str, bucket: str, split: str, regression: bool) -> tuple[str, str, str]:
    """(suite, label, kind) of the group a task is tested in for harm: its regression suite, the
    holdout split, or its train bucket."""
    if regression:
        return suite, "regression", "regression"
    if split == "holdout":
        return "*", "holdout", "holdout"
    return suite, bucket, "bucket"


def is_named(group: tuple[str, str, str], named: Iterable[tuple[str, str]]) -> bool:
    """Whether a harm group (suite, label, kind) is a train bucket among `named` (suite, bucket)s."""
    suite, label, kind = group
    return kind == "bucket" and (suite, label) in named


def named_buckets(changed: Iterable[str], buckets: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """The (suite, bucket)s that a patch's changed lines name: some line holds, as a word (or
    with a plural `s`), a word of three letters or more of the bucket's name that no other bucket
    of its suite has in its name (`template_mood`: `mood`; `template` is in many)."""
    buckets = sorted(set(buckets))
    words = {bucket: set(WORD.findall(bucket[1].lower())) for bucket in buckets}
    shared = Counter((suite, word) for (suite, _), own in words.items() for word in own)
    text = set(WORD.findall(" ".join(changed).lower()))
    return frozenset(bucket for bucket, own in words.items()
                     if any(len(word) >= 3 and shared[(bucket[0], word)] == 1 and (word in text or word + "s" in text)
                            for word in own))


def groups_of(table: PairTable, targets: Iterable[tuple[str, str]],
              named: Iterable[tuple[str, str]] = ()) -> Groups:
    """The targeted buckets, and every harm group with its tasks: the other train buckets (by
    suite and bucket), then the holdout split, then all of those together (`POOLED`, when there
    are two or more), then each regression suite. `named`: the buckets
    the patch names (`named_buckets`), for the harm thresholds."""
    targets = sorted(set(targets))
    members: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for key in sorted(table.tasks):
        task = table.tasks[key]
        group = harm_group(task.suite, task.bucket, task.split, task.regression)
        if group[2] == "bucket" and (group[0], group[1]) in targets:
            continue
        members.setdefault(group, []).append(key)
    pooled = [key for group, keys in members.items() if group[2] in ("bucket", "holdout") for key in keys]
    if sum(1 for group in members if group[2] in ("bucket", "holdout")) >= 2:
        members[POOLED] = sorted(pooled)
    order = sorted(members, key=lambda group: (KIND_ORDER[group[2]], group[0], group[1]))
    return Groups(targets, [(suite, label, kind, members[(suite, label, kind)]) for suite, label, kind in order],
                  frozenset(named))


def improvement_status(table: PairTable, targets: list[tuple[str, str]], policy: GatePolicy
                       ) -> dict[tuple[str, str], tuple[str, BucketChange]]:
    """Per targeted bucket: `improved`, `open` (more pairs could settle it), `futile` or `capped`,
    with its row. Each bucket is tested at `alpha` on its own p-value, with no adjustment for
    the number of targets: the candidate passes only when every one improves, an
    intersection-union test (Berger 1982), whose level is that of its single tests."""
    status = {}
    for suite, bucket in targets:
        stats = group_stats(table, table.keys(suite=suite, bucket=bucket, split="train", regression=False))
        row = _change(suite, bucket, stats, targeted=True)
        if stats.unjudged:
            state = "unjudged"
        elif row.p_improve < policy.alpha and stats.change > EPSILON:
            state = "improved"
        elif stats.pairs >= policy.max_target_pairs:
            state = "capped"
        elif stats.pairs >= FUTILE_AFTER and stats.change <= EPSILON:
            state = "futile"
        else:
            state = "open"
        row.verdict = {"improved": "improved", "unjudged": "unjudged", "futile": "futile"}.get(state, "not shown")
        status[(suite, bucket)] = (state, row)
    return status


def harm_rows(table: PairTable, groups: Groups, policy: GatePolicy) -> list[tuple[list[tuple[str, str]], BucketChange]]:
    """Per harm group: its task keys and its row with a verdict (thresholds: `harm_thresholds`)."""
    out = []
    for (suite, label, kind, keys), threshold in zip(groups.harm, harm_thresholds(groups, policy)):
        stats = group_stats(table, keys)
        row = _change(suite, label, stats, kind=kind)
        row.mde = stats.detectable_drop(threshold)
        if stats.unjudged:
            row.verdict = "unjudged"
        elif stats.harm_evalue >= threshold:
            row.verdict = "harmed"
        elif suspicious(stats, policy.clear_after) and not row.mde <= policy.max_bucket_drop:
            row.verdict = "not shown safe"
        else:
            row.verdict = "no harm found"
        out.append((keys, row))
    return out


def harm_thresholds(groups: Groups, policy: GatePolicy) -> list[float]:
    """Per harm group, the wealth that shows harm: a weighted Bonferroni over e-values. With m
    groups of which the patch names k buckets (0 < k < m), each named one gets
    k / (`NAMED_SHARE` * alpha_harm) and each other one (m - k) / ((1 - `NAMED_SHARE`) * alpha_harm);
    otherwise every group gets m / alpha_harm. The levels 1/threshold sum to alpha_harm either
    way, so the chance that noise vetoes a harmless patch stays at most alpha_harm; the weights
    come from the patch's text, fixed before any pair is run."""
    m = len(groups.harm)
    flags = [is_named((suite, label, kind), groups.named) for suite, label, kind, _ in groups.harm]
    k = sum(flags)
    if k in (0, m) or not policy.name_weighting:
        return [max(1, m) / policy.alpha_harm] * m
    return [k / (NAMED_SHARE * policy.alpha_harm) if flag else (m - k) / ((1 - NAMED_SHARE) * policy.alpha_harm)
            for flag in flags]


def suspicious(stats: GroupStats, clear_after: int = 0) -> bool:
    """A harm group worth more pairs: some pair changed, and its bets on a drop have not lost half
    their stake or it has fewer than `clear_after` pairs."""
    return not stats.unjudged and stats.moved > 0 and (stats.harm_wealth > CLEARED_BELOW or stats.pairs < clear_after)


# ---------------------------------------------------------------- the decision
def decide(table: PairTable, *, targets: Iterable[tuple[str, str]], policy: GatePolicy = GatePolicy(),
           stage: str = "full", rollouts: int = 0, capped: bool = False,
           named: Iterable[tuple[str, str]] = ()) -> Decision:
    """The gate's decision on the pairs collected. `stage="targeted"` judges the targeted buckets
    only (the comparison stopped before running the rest). `named`: the buckets the patch names."""
    groups = groups_of(table, targets, named if policy.name_weighting else ())
    status = improvement_status(table, groups.targets, policy)
    target_rows = [row for _, row in status.values()]
    harmed = harm_rows(table, groups, policy) if stage != "targeted" else []
    rows = target_rows + [row for _, row in harmed if row.kind == "bucket"]
    rows.sort(key=lambda row: (row.suite, row.bucket))
    extra = {row.kind: row for _, row in harmed if row.kind == "holdout"}
    extra["overall"] = _change("*", "overall (train)", group_stats(table, table.keys(split="train", regression=False)),
                               kind="overall")
    rows += [row for _, row in harmed if row.kind in ("pooled", "regression")]
    excluded, worse, better = table.errored_counts()

    rules: list[RuleResult] = []
    if policy.mode == "lenient":
        rules.append(_lenient(target_rows, [row for _, row in harmed]))
    else:
        rules.append(_improvement(status, policy))
        if stage != "targeted":
            named_groups = [f"{suite}/{label}" for suite, label, kind, _ in groups.harm
                            if is_named((suite, label, kind), groups.named)]
            rules.append(_no_harm([row for _, row in harmed], harm_thresholds(groups, policy), policy, named_groups))
    if stage != "targeted":
        rules.append(_errored_rule(worse, better, policy))
    return Decision(accepted=all(rule.passed for rule in rules), mode=policy.mode, stage=stage, rules=rules,
                    buckets=rows, overall=_summary(extra.get("overall")), holdout=_summary(extra.get("holdout")),
                    excluded_pairs=excluded, rollouts=rollouts, capped=capped, non_voting=sorted(table.non_voting))


def _summary(row: BucketChange | None) -> dict[str, Any]:
    if row is None:
        return {"before": math.nan, "after": math.nan, "change": 0.0, "tasks": 0, "pairs": 0}
    summary = {"before": row.before, "after": row.after, "change": row.change, "tasks": row.tasks,
               "pairs": row.pairs}
    if row.kind != "overall":  # the train split overall is described, not tested
        summary.update(verdict=row.verdict, p_harm=row.p_harm, mde=None if math.isnan(row.mde) else row.mde)
    return summary


def _label(row: BucketChange) -> str:
    return row.bucket if row.suite == "*" else f"{row.suite}/{row.bucket}"


def _improvement(status: dict, policy: GatePolicy) -> RuleResult:
    problems, wins = [], []
    for state, row in status.values():
        label = _label(row)
        if state == "improved":
            wins.append(f"{label} {row.before:.2f} -> {row.after:.2f} (p={row.p_improve:.3f}, "
                        f"{row.pairs} pairs)")
        elif state == "unjudged":
            problems.append(f"{label} is scored only by uncalibrated judges (unjudged)")
        elif row.pairs == 0:
            problems.append(f"{label} has no scored pairs")
        elif row.change <= EPSILON:
            problems.append(f"{label} did not improve ({row.before:.2f} -> {row.after:.2f}, {row.pairs} pairs)")
        else:
            problems.append(f"{label} rose {row.change:+.2f} but not significantly "
                            f"(p={row.p_improve:.3f} >= {policy.alpha}, {row.pairs} pairs)")
    if not status:
        problems.append("no bucket was targeted")
    numbers = {"alpha": policy.alpha, "targeted": [row.as_dict() for _, row in status.values()]}
    if problems:
        return RuleResult("improvement", False, "; ".join(problems), numbers)
    return RuleResult("improvement", True, "; ".join(wins), numbers)


def _no_harm(rows: list[BucketChange], thresholds: list[float], policy: GatePolicy,
             named: list[str]) -> RuleResult:
    harmed = [f"{_label(r)} fell {r.change:+.2f}, significant (p={r.p_harm:.4f}, {r.pairs} pairs)"
              for r in rows if r.verdict == "harmed"]
    if policy.refuse_unsafe != "never":
        harmed += [f"{_label(r)} not shown safe ({r.change:+.2f}, detectable drop {r.mde:.2f}, {r.pairs} pairs)"
                   for r in rows if r.verdict == "not shown safe" and (policy.refuse_unsafe == "any" or r.kind == "pooled")]
    numbers = {"alpha_harm": policy.alpha_harm, "groups": len(rows),
               "evalue_threshold": max(thresholds, default=1 / policy.alpha_harm),
               "evalue_thresholds": {_label(row): value for row, value in zip(rows, thresholds)},
               "max_bucket_drop": policy.max_bucket_drop, "named": named}
    if harmed:
        return RuleResult("no_harm", False, "; ".join(harmed), numbers)
    unsure = [f"{_label(r)} ({r.change:+.2f}, detectable drop {r.mde:.2f})" for r in rows
              if r.verdict == "not shown safe"]
    note = f"; not shown safe at these pairs: {', '.join(unsure)}" if unsure else ""
    weighted = f", half of it on {', '.join(named)}, which the patch names" if named else ""
    return RuleResult("no_harm", True, f"no significant drop in {len(rows)} group(s) "
                                       f"(family-wise alpha {policy.alpha_harm}{weighted}){note}", numbers)


def _errored_rule(worse: int, better: int, policy: GatePolicy) -> RuleResult:
    p = sign_test_p(worse, better)
    numbers = {"candidate_only": worse, "base_only": better, "p": p}
    if worse > better and p < policy.alpha_harm:
        return RuleResult("errored", False, f"the candidate errored on {worse} pair(s) where the base did not, "
                                            f"against {better} the other way (sign test p={p:.3f})", numbers)
    return RuleResult("errored", True, f"errored pairs: {worse} candidate-only, {better} base-only", numbers)


def _lenient(targets: list[BucketChange], others: list[BucketChange]) -> RuleResult:
    rows = [row for row in targets + others if row.kind == "bucket" and row.pairs]
    up = [_label(r) for r in rows if r.change > EPSILON]
    down = [f"{_label(r)} {r.change:+.2f}" for r in rows if r.change < -EPSILON]
    if down:
        return RuleResult("lenient", False, f"bucket mean(s) fell: {', '.join(down)}", {"up": up, "down": down})
    if not up:
        return RuleResult("lenient", False, "no bucket mean rose", {"up": up, "down": down})
    return RuleResult("lenient", True, f"rose: {', '.join(up)}; none fell", {"up": up, "down": down})
