"""The sequential tests of one group of pairs: is its mean change up (improvement) or down (harm)?

A group's change is the mean over its tasks of each task's mean pair change (tasks weigh the
same). Its tests are sign tests by betting (`optimizer.stats`): under the null hypothesis that
the patch changes nothing, the two trials of a pair are exchangeable, so each non-zero change is
as likely up as down; the test bets on the signs of the changes in the order the pairs were run,
and stays valid however many batches are added and whenever it stops.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from optimizer.gate.pairs import PairTable
from optimizer.stats import HARM_GRID, anytime_p, detectable_share, signs, wealth_path

EPSILON = 1e-9
"""A change at most this far from zero counts as none."""


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
    pass_change: float = 0.0
    """The change of the pass rate, task-weighted like `change`: partial credit can keep a
    bucket's mean score nearly level while its pass rate collapses."""

    @property
    def fell(self) -> float:
        return fell(self.change, self.pass_change)

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


def fell(change: float, pass_change: float) -> float:
    """The larger of the two drops seen, mean score or pass rate (0 when neither fell)."""
    return max(0.0, -change, -pass_change)


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
    pass_change = sum(sum(float(p.after_passed) - float(p.before_passed) for p in usable[k]) / len(usable[k])
                      for k in scored) / len(scored)
    return GroupStats(len(scored), sum(len(usable[k]) for k in scored), before, after, after - before, rounds,
                      [pair.diff for pair in ordered], unjudged=False, flips=flips, pass_change=pass_change)
