"""Whether a harm group is harmed, cleared, or worth more pairs: its threshold (a Bonferroni over
e-values, weighted toward the buckets a patch names when `name_weighting` is on), its verdict,
and the lean that tells the comparison where the next harm pairs go."""

from __future__ import annotations

import math

from optimizer.gate.groups import Groups, is_named
from optimizer.gate.pairs import PairTable
from optimizer.settings.parts import GatePolicy
from optimizer.gate.report import BucketChange, bucket_row
from optimizer.gate.sequential import GroupStats, group_stats

CLEARED_BELOW = 0.5
"""A harm group whose bets on a drop fall to this wealth is cleared: the evidence favours no drop
two to one (the lower boundary of Wald's sequential probability ratio test; the upper one is
the group's harm threshold)."""
NAMED_SHARE = 0.5
"""Share of `alpha_harm` spent on the buckets a patch names, when it names some but not all
(`harm_thresholds`): a change is likeliest to break the behaviour its own words are about."""


def harm_rows(table: PairTable, groups: Groups, policy: GatePolicy) -> list[tuple[list[tuple[str, str]], BucketChange]]:
    """Per harm group: its task keys and its row with a verdict (thresholds: `harm_thresholds`)."""
    out = []
    for (suite, label, kind, keys), threshold in zip(groups.harm, harm_thresholds(groups, policy)):
        stats = group_stats(table, keys)
        row = bucket_row(suite, label, stats, kind=kind)
        row.mde = stats.detectable_drop(threshold)
        if stats.unjudged:
            row.verdict = "unjudged"
        elif stats.pairs == 0:  # every pair had an unscored side: nothing was seen, so nothing is shown safe
            row.verdict = "not shown safe"
        elif stats.harm_evalue >= threshold:
            row.verdict = "harmed"
        elif policy.refuse_beyond_margin and beyond_margin(row, policy):
            row.verdict = "beyond margin"
        elif suspicious(stats, policy.clear_after) and (not row.mde <= policy.max_bucket_drop
                                                         or stats.fell > policy.max_bucket_drop):
            row.verdict = "not shown safe"  # open, and a drop beyond the margin could hide (or was seen)
        else:
            row.verdict = "no harm found"
        out.append((keys, row))
    return out


def beyond_margin(row: BucketChange, policy: GatePolicy) -> bool:
    """Whether a group's drop is shown beyond the margin: its t-interval's upper end (95%, so a
    one-sided test at 2.5%) below `-max_bucket_drop`. The e-value tests stay the gate's harm
    evidence while pairs are run; this is read once, on the pairs the comparison ended with (the
    verdicts are given at the decision only), and can only turn an accept into a refusal. Not
    before `margin_min_pairs` pairs."""
    return (row.pairs >= policy.margin_min_pairs and not math.isnan(row.ci_high)
            and row.ci_high < -policy.max_bucket_drop)


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
