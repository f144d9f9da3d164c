"""Whether each targeted bucket improved, and whether more pairs could still show it: the
improvement test and its stopping rules (shown, capped at `max_target_pairs`, futile)."""

from __future__ import annotations

from optimizer.gate.pairs import PairTable
from optimizer.settings.parts import GatePolicy
from optimizer.gate.report import BucketChange, bucket_row
from optimizer.gate.sequential import EPSILON, group_stats

FUTILE_AFTER = 16
"""Pairs after which a targeted bucket whose mean change is not above zero stops (futility)."""


def improvement_status(table: PairTable, targets: list[tuple[str, str]], policy: GatePolicy
                       ) -> dict[tuple[str, str], tuple[str, BucketChange]]:
    """Per targeted bucket: `improved`, `open` (more pairs could settle it), `futile` or `capped`,
    with its row. Each bucket is tested at `alpha` on its own p-value, with no adjustment for
    the number of targets: the candidate passes only when every one improves, an
    intersection-union test (Berger 1982), whose level is that of its single tests."""
    status = {}
    for suite, bucket in targets:
        stats = group_stats(table, table.keys(suite=suite, bucket=bucket, split="train", regression=False))
        row = bucket_row(suite, bucket, stats, targeted=True)
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
