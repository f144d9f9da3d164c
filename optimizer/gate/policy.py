"""What the gate is asked to hold: its mode, its levels and the comparison's pair budget. Decides
nothing itself; every rule and every stopping point reads its numbers from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GateMode = Literal["strict", "lenient"]


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
    refuse_beyond_margin: bool = True
    """Reject when a group's 95% interval of change lies wholly below `-max_bucket_drop` at the
    decision, whatever its e-value says (`harm.beyond_margin`; the group's verdict is then *beyond
    margin*): a drop shown beyond the margin by the fixed-sample test of inferiority, checked once,
    at the end."""
    margin_min_pairs: int = 8
    """Pairs a group needs before its interval is read for `refuse_beyond_margin`: a t-interval
    over two or three changes, or over changes that happen to be equal, is too short to refuse on."""
    name_weighting: bool = False
    """Weight the harm tests toward the buckets a patch names (`harm_thresholds`). Off: a harm
    worded to name another bucket moved half of `alpha_harm` and the pairs to an innocent one
    (docs/gate.md); kept for `benchmarks/gate_power.py --arms weighted`."""

    propose_open: str = "leaning"
    """Which harm groups still open at an accept make it a *proposal* (kept for a reviewer,
    never merged by an unattended job) instead of a *merge*: `leaning`, an open group whose mean
    score or pass rate fell by more than `max_bucket_drop` with its own harm test below
    `alpha_harm` before the Bonferroni (or that has no pair scored on both sides), or `any` open
    group (`rules.verdict_of`)."""

    holdout_rule: str = "no_fall"
    """How the holdout split confirms an accept: `harm`, judged as every harm group; `no_fall`,
    besides, an accept whose holdout fell (mean score or pass rate) by more than `max_bucket_drop`
    is a *proposal* whatever its harm test says (`rules.leans`), and the safety stage may spend its
    pairs there first."""

    safety_rollouts: int = 100
    """Trials an accepted candidate may run past its budget on the harm groups that would make its
    verdict *propose* (`rules.leans`), before the verdict is given: a group that fell by chance
    drifts back within the margin and the candidate is merged; a harmed one is shown harmed and
    rejected. Only a candidate whose targets improved and that leans pays it. 0: off."""

    def budget(self, targets: int) -> int:
        """Trials a proposal with this many targeted buckets may run: `max_rollouts`, plus
        `extra_target_rollouts` for each target after the first (each needs improvement pairs of
        its own; without them the harm checks would get only what the targets left)."""
        return self.max_rollouts + self.extra_target_rollouts * max(0, targets - 1)

