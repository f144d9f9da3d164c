"""A night's accepts as one family: the improvement test's level spent over its decisions.

A nightly gates one candidate after another and merges every accept, so each decision at
`alpha` would let a night of patches that change nothing merge one with chance up to
1 - (1 - alpha)^decisions (12 decisions at 0.05: 46%). Online alpha-spending keeps the
family-wise error of an open-ended stream of tests at most `night_alpha` by giving test j the
level `night_alpha * gamma_j` for a fixed sequence `gamma` whose sum is at most 1 (Tian and
Ramdas, "Online control of the familywise error rate", Statistical Methods in Medical Research
30(4), 2021; a union bound, valid whatever the dependence between the tests).

The sequence here is gamma_j = 1 / (j (j + 1)), which sums to exactly 1 and gives the first
decision half of `night_alpha`: with the defaults (0.10) the first candidate of a night is
tested at 0.05, as `optimizer run` tests its candidates, and the second at 0.0167, the third
at 0.0083, the sixth at 0.0024. The decisions are numbered in the order the night makes them,
counted from the store, so a resumed night gives every decision the level it had.
"""

from __future__ import annotations


def decision_alpha(alpha: float, night_alpha: float, decision: int) -> float:
    """The improvement test's level for the `decision`-th gated candidate of a night (from 1):
    its share of `night_alpha`, never above the per-decision `alpha`."""
    if decision < 1:
        raise ValueError(f"decisions are numbered from 1, not {decision}")
    return min(alpha, night_alpha / (decision * (decision + 1)))


def spent(alpha: float, night_alpha: float, decisions: int) -> float:
    """The level the night's first `decisions` decisions spent: a bound on the chance that any
    of them accepted a patch that changes nothing."""
    return sum(decision_alpha(alpha, night_alpha, j) for j in range(1, decisions + 1))
