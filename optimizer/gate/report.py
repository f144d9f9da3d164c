"""What the gate reports: a row per group (`BucketChange`), a result per rule and the `Decision`.
Decides nothing: the rules (`optimizer.gate.rules`) fill these in."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from optimizer.settings.parts import GateMode
from optimizer.gate.sequential import GroupStats, fell
from optimizer.scoring import mean_interval


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
    """improved | not shown | futile | harmed | beyond margin | no harm found | not shown safe | unjudged"""
    mde: float = math.nan
    """The drop the harm test detects with 80% probability at these pairs (NaN under 2 rounds)."""
    kind: str = "bucket"
    """bucket | holdout | overall | regression (overall is descriptive: not tested)"""
    pass_change: float = 0.0
    """The change of the pass rate (`GroupStats.pass_change`)."""

    @property
    def fell(self) -> float:
        return fell(self.change, self.pass_change)

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
    shown_tasks: list[str] = field(default_factory=list)
    """`suite/task` of the tasks left out of the pairs because the base or candidate prompt shows
    their input as a worked example (`optimizer.proposal.examples`)."""
    verdict: str = ""
    """For an accepted candidate, what an unattended job may do with it: `merge`, or `propose`
    (keep it for a reviewer: some harm group is still open and leaning toward a drop, see
    `rules.verdict_of`); empty when rejected."""
    open_groups: list[str] = field(default_factory=list)
    """The harm groups still open (*not shown safe*) at the decision, with their changes."""

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
                "rollouts": self.rollouts, "capped": self.capped, "non_voting": self.non_voting,
                "shown_tasks": self.shown_tasks, "verdict": self.verdict, "open_groups": self.open_groups}


def bucket_row(suite: str, bucket: str, stats: GroupStats, *, kind: str = "bucket",
            targeted: bool = False) -> BucketChange:
    low, _, high = mean_interval(stats.rounds, bounds=(-1.0, 1.0)) if len(stats.rounds) >= 2 else (
        math.nan, math.nan, math.nan)
    return BucketChange(suite, bucket, stats.tasks, stats.pairs, stats.before, stats.after, stats.change,
                        stats.p_improve, min(1.0, 1.0 / stats.harm_evalue), targeted, ci_low=low, ci_high=high,
                        kind=kind, verdict="unjudged" if stats.unjudged else "", pass_change=stats.pass_change)

