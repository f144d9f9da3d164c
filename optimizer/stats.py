"""The statistics behind the gate: anytime-valid tests by betting, Holm (the previous gate's, kept
for `benchmarks/legacy_gate.py`), detectable effects and binomial intervals. Pure functions over
numbers; `optimizer.gate` decides with them.

**Testing by betting** (Shafer 2021; Waudby-Smith & Ramdas 2024). To test H0: E[X] <= 0 for
observations X in [-1, 1] (paired score changes), a gambler starts with wealth 1 and, before each
observation, stakes a fraction lambda in [0, 1) on X being positive: wealth *= 1 + lambda * X.
Under H0 the wealth is a non-negative supermartingale, so by Ville's inequality the chance that
it *ever* reaches 1/alpha is at most alpha, however many observations are taken and whenever one
stops. That is what lets the gate add pairs in batches and look after each batch without
spending alpha on the looks. We average the wealth of a few constant bets (a grid): an average
of test supermartingales is one too, and it grows nearly as fast as the best bet in the grid
(it gives up at most log(len(grid)) of log-wealth), where one fixed bet is either timid on large
effects or ruined by a few bad draws on small ones. The improvement test spreads its grid over
small and large effects (`IMPROVE_GRID`); the harm test bets on drops large enough to matter
within the budget (`HARM_GRID`, see `benchmarks/bet_grid.py`).

The anytime-valid p-value is 1 / (the largest wealth so far), capped at 1 (Ramdas et al. 2023).

**The gate bets on signs.** Score changes of a prompt patch are often small in range (a failing
card keeps most of its credit, so a pair moves by +-0.3, not +-1), and a bet sized for the [-1, 1]
range grows slowly on them. Under the gate's null hypothesis (the patch changes nothing, so the
two trials of a pair are exchangeable) each non-zero change is positive or negative with
probability 1/2 whatever its size; betting on the *sign* is then a test martingale (a sequential
sign test, the betting form of McNemar's test for pass/fail), and its power does not depend on
the scores' scale. Zero changes carry no bet.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np

IMPROVE_GRID = (0.4, 0.7)
HARM_GRID = (0.5, 0.75)


def wealth_path(observations: Sequence[float], grid: Sequence[float] = IMPROVE_GRID) -> np.ndarray:
    """Wealth after each observation of the averaged constant bets on E[X] > 0 (X in [-1, 1])."""
    values = np.clip(np.asarray(observations, dtype=float), -1.0, 1.0)
    if values.size == 0:
        return np.ones(0)
    logs = np.cumsum(np.log1p(np.outer(values, np.asarray(grid, dtype=float))), axis=0)
    return np.exp(logs).mean(axis=1)


def evalue(observations: Sequence[float], grid: Sequence[float] = IMPROVE_GRID) -> float:
    """The largest wealth reached so far (1 when there is nothing to bet on yet)."""
    path = wealth_path(observations, grid)
    return float(max(1.0, path.max())) if path.size else 1.0


def anytime_p(observations: Sequence[float], grid: Sequence[float] = IMPROVE_GRID) -> float:
    """p-value valid at any stopping time: 1 / max wealth, capped at 1."""
    return min(1.0, 1.0 / evalue(observations, grid))


def signs(changes: Sequence[float], *, down: bool = False) -> list[float]:
    """The signs of the non-zero changes (negated for a test of a drop), the sign test's bets."""
    flip = -1.0 if down else 1.0
    return [flip * (1.0 if value > 0 else -1.0) for value in changes if abs(value) > 1e-12]


def detectable_share(nonzero: int, threshold: float, power: float = 0.8,
                     grid: Sequence[float] = HARM_GRID) -> float:
    """The smallest excess of signs one way, E[sign] in (0, 1], that the sign bets of `grid`
    detect with probability about `power` within `nonzero` non-zero changes (normal approximation
    of each bet's log-wealth; the grid's log(len) is paid). 1.0 when even all-one-way cannot."""
    if nonzero < 1:
        return 1.0
    from scipy.stats import norm

    z = float(norm.ppf(power))
    goal = math.log(threshold * len(grid))

    def detects(mu: float) -> bool:
        q = (1 + mu) / 2
        for lam in grid:
            up, down = math.log1p(lam), math.log1p(-lam)
            mean = q * up + (1 - q) * down
            spread = math.sqrt(q * (1 - q)) * (up - down)
            if nonzero * mean - z * math.sqrt(nonzero) * spread >= goal:
                return True
        return False

    if not detects(1.0):
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (low, middle) if detects(middle) else (middle, high)
    return high


def welch_greater_p(first: list[float], second: list[float]) -> float:
    """One-sided p-value that `first` has the higher mean (Welch's t-test, unequal variances). 1
    with fewer than two values on either side; with no spread on both, 0 when the first mean is
    higher, else 1."""
    if len(first) < 2 or len(second) < 2:
        return 1.0
    from scipy.stats import t

    shares = [statistics.variance(values) / len(values) for values in (first, second)]
    se2 = sum(shares)
    gap = statistics.fmean(first) - statistics.fmean(second)
    if se2 == 0:
        return 0.0 if gap > 0 else 1.0
    df = se2 ** 2 / (shares[0] ** 2 / (len(first) - 1) + shares[1] ** 2 / (len(second) - 1))
    return float(t.sf(gap / math.sqrt(se2), df))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order; valid for any
    dependence between the tests, so also for anytime-valid p-values at a stopping time."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[index]))
        adjusted[index] = running
    return adjusted


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval (Clopper & Pearson 1934)."""
    if trials == 0:
        return 0.0, 1.0
    from scipy.stats import beta

    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else float(beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1 - tail, successes + 1, trials - successes))
    return low, high


def sign_test_p(worse: int, better: int) -> float:
    """One-sided exact sign test (McNemar's test on the discordant pairs): the chance of at least
    `worse` of `worse + better` discordant pairs going one way when each way is equally likely."""
    total = worse + better
    if total == 0:
        return 1.0
    from scipy.stats import binom

    return float(binom.sf(worse - 1, total, 0.5))
