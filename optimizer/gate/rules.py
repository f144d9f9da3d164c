"""The decision: the gate's rules over the pairs collected, and whether the candidate is accepted.

Strict mode: every target improved (`optimizer.gate.improvement`), no harm group harmed
(`optimizer.gate.harm`), and the candidate's trials end without a score no more often than the
base prompt's (a sequential sign test at `alpha_harm` over the pairs where only one side
errored, the infrastructure's endings included: a prompt that makes the model slow or its calls
fail ends its trials that way). Lenient mode: some bucket mean up, no bucket mean down.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from optimizer.gate.groups import groups_of, is_named
from optimizer.gate.harm import harm_rows, harm_thresholds
from optimizer.gate.improvement import improvement_status
from optimizer.gate.pairs import PairTable, Unscored
from optimizer.settings.parts import GatePolicy
from optimizer.gate.report import BucketChange, Decision, RuleResult, bucket_row
from optimizer.gate.sequential import EPSILON, group_stats
from optimizer.stats import HARM_GRID, anytime_p


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
    extra["overall"] = bucket_row("*", "overall (train)", group_stats(table, table.keys(split="train", regression=False)),
                               kind="overall")
    rows += [row for _, row in harmed if row.kind in ("pooled", "regression")]
    unscored = table.unscored_counts()

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
        rules.append(_errored_rule(unscored, policy))
    accepted = all(rule.passed for rule in rules)
    open_rows = [row for _, row in harmed if row.verdict == "not shown safe"
                 or (row.kind == "holdout" and policy.holdout_rule == "no_fall")]
    return Decision(accepted=accepted, mode=policy.mode, stage=stage, rules=rules,
                    buckets=rows, overall=_summary(extra.get("overall")), holdout=_summary(extra.get("holdout")),
                    excluded_pairs=unscored.excluded, rollouts=rollouts, capped=capped, non_voting=sorted(table.non_voting),
                    verdict=verdict_of(open_rows, policy) if accepted else "",
                    open_groups=[f"{_label(row)} ({_unsure(row)})" for row in open_rows
                                 if row.verdict == "not shown safe" or holdout_fell(row.kind, row.fell, policy)])


def verdict_of(open_rows: list[BucketChange], policy: GatePolicy) -> str:
    """What an unattended job may do with an accepted candidate. `propose` (a reviewer decides)
    when some open group *leans* toward harm: its mean score or pass rate fell by more than
    `max_bucket_drop` and its own harm test, before the Bonferroni over the groups, is below
    `alpha_harm` (p_harm, the inverse of its e-value); or it has no pair scored on both sides; or
    (`propose_open = any`) any group is open; and every lenient accept. `merge` otherwise: the
    open groups' drops are within what noise gives them, and the nightly's watch goes on testing
    every group of a merged patch on later nights (`optimizer.nightly.watch`)."""
    if policy.mode != "strict":
        return "propose"
    leaning = [row for row in open_rows
               if (policy.propose_open == "any" and row.verdict == "not shown safe") or row.pairs == 0
               or leans(row.fell, 1 / row.p_harm if row.p_harm > 0 else math.inf, policy, row.kind)]
    return "propose" if leaning else "merge"


def leans(fell: float, harm_evalue: float, policy: GatePolicy, kind: str = "bucket") -> bool:
    """Whether an open harm group leans toward harm: it fell (mean score or pass rate) by more
    than `max_bucket_drop`, and its own harm test, before the Bonferroni over the groups, is at
    or below `alpha_harm` (its e-value at least 1 / `alpha_harm`). With `holdout_rule = no_fall`
    the holdout leans on its fall alone."""
    if kind == "holdout" and policy.holdout_rule == "no_fall":
        return holdout_fell(kind, fell, policy)
    return fell > policy.max_bucket_drop and harm_evalue >= 1 / policy.alpha_harm


def holdout_fell(kind: str, fell: float, policy: GatePolicy) -> bool:
    """Under `holdout_rule = no_fall`: the group is the holdout and it fell (mean score or pass
    rate) by more than `max_bucket_drop`, whatever its harm test says."""
    return kind == "holdout" and policy.holdout_rule == "no_fall" and fell > policy.max_bucket_drop


def _summary(row: BucketChange | None) -> dict[str, Any]:
    if row is None:
        return {"before": math.nan, "after": math.nan, "change": 0.0, "tasks": 0, "pairs": 0}
    summary = {"before": row.before, "after": row.after, "change": row.change, "pass_change": row.pass_change,
               "tasks": row.tasks, "pairs": row.pairs}
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
    harmed = []
    buckets = [r for r in rows if r.kind == "bucket" and r.change is not None and r.pairs]
    steepest = min(buckets, key=lambda r: r.change, default=None)
    for r in rows:
        if r.verdict == "harmed":
            harmed.append(f"{_label(r)} fell {r.change:+.2f}, significant (p={r.p_harm:.4f}, {r.pairs} pairs)"
                          + (f" (of its buckets {_label(steepest)} fell most, {steepest.change:+.2f} over "
                             f"{steepest.pairs} pairs)" if r.kind == "pooled" and steepest is not None
                             and steepest.change < 0 and not any(b.verdict == "harmed" for b in buckets) else ""))
        elif r.verdict == "beyond margin":
            harmed.append(f"{_label(r)} fell {r.change:+.2f}, its 95% interval [{r.ci_low:+.2f}, {r.ci_high:+.2f}] "
                          f"wholly below -{policy.max_bucket_drop:.2f} ({r.pairs} pairs)")
        elif r.verdict == "not shown safe" and (policy.refuse_unsafe == "any" or
                                                (policy.refuse_unsafe == "pooled" and r.kind == "pooled")):
            harmed.append(f"{_label(r)} not shown safe ({_unsure(r)})")
    numbers = {"alpha_harm": policy.alpha_harm, "groups": len(rows),
               "evalue_threshold": max(thresholds, default=1 / policy.alpha_harm),
               "evalue_thresholds": {_label(row): value for row, value in zip(rows, thresholds)},
               "max_bucket_drop": policy.max_bucket_drop, "named": named}
    if harmed:
        return RuleResult("no_harm", False, "; ".join(harmed), numbers)
    unsure = [f"{_label(r)} ({_unsure(r)})" for r in rows if r.verdict == "not shown safe"]
    note = f"; not shown safe at these pairs: {', '.join(unsure)}" if unsure else ""
    weighted = f", half of it on {', '.join(named)}, which the patch names" if named else ""
    return RuleResult("no_harm", True, f"no significant drop in {len(rows)} group(s) "
                                       f"(family-wise alpha {policy.alpha_harm}{weighted}){note}", numbers)


def _unsure(row: BucketChange) -> str:
    if row.pairs == 0:
        return "no pair with both sides scored"
    return (f"{row.change:+.2f}, pass rate {row.pass_change:+.2f}, detectable drop {row.mde:.2f}, "
            f"{row.pairs} pairs")


def unscored_p(unscored: Unscored) -> float:
    """The anytime-valid p-value of a sequential sign test (bets of `HARM_GRID` on the candidate's
    side) over the pairs where one side only ended without a score, read in pair order. Under the
    null hypothesis (the patch changes nothing) the two trials of a pair are exchangeable, so each
    such pair is as likely to fall on either side. Anytime-valid, so the comparison may stop as
    soon as it is below `alpha_harm` (`errored_rejects`)."""
    return anytime_p(unscored.signs, HARM_GRID)


def errored_rejects(table: PairTable, policy: GatePolicy) -> bool:
    """Whether the candidate's trials already end unscored significantly more often than the base's."""
    unscored = table.unscored_counts()
    return unscored.candidate_only > unscored.base_only and unscored_p(unscored) < policy.alpha_harm


def _errored_rule(unscored: Unscored, policy: GatePolicy) -> RuleResult:
    """The candidate is rejected when its trials end without a score significantly more often
    than the base prompt's on the same pairs (`unscored_p`). The infrastructure's endings count: a
    patch that makes the agent write or read more slows the model down, and its trials run out
    of time on the candidate's side only; left out, their groups would look unharmed on the pairs
    that remain."""
    worse, better = unscored.candidate_only, unscored.base_only
    p = unscored_p(unscored)
    numbers = {"candidate_only": worse, "base_only": better, "p": p,
               "candidate_errored": unscored.candidate_errored, "candidate_spoiled": unscored.candidate_spoiled,
               "base_errored": unscored.base_errored, "base_spoiled": unscored.base_spoiled}
    if worse > better and p < policy.alpha_harm:
        how = _kinds(unscored.candidate_errored, unscored.candidate_spoiled)
        slow = (" The infrastructure's endings fall on the candidate's side: the patch slows the model down, or the "
                "machine was busier while the candidate ran; a rerun on a quiet machine tells the two apart."
                if unscored.candidate_spoiled else "")
        return RuleResult("errored", False, f"the candidate's trials ended without a score on {worse} pair(s) ({how}) "
                                            f"where the base's did not, against {better} the other way (sequential sign "
                                            f"test p={p:.3g} < {policy.alpha_harm}).{slow}", numbers)
    detail = (f" (candidate: {_kinds(unscored.candidate_errored, unscored.candidate_spoiled)}; base: "
              f"{_kinds(unscored.base_errored, unscored.base_spoiled)})" if worse or better else "")
    return RuleResult("errored", True, f"pairs with one side unscored: {worse} candidate-only, {better} "
                                       f"base-only{detail}", numbers)


def _kinds(errored: int, spoiled: int) -> str:
    return f"{errored} errored, {spoiled} past the deadline with the model failing or slow"


def _lenient(targets: list[BucketChange], others: list[BucketChange]) -> RuleResult:
    rows = [row for row in targets + others if row.kind == "bucket" and row.pairs]
    up = [_label(r) for r in rows if r.change > EPSILON]
    down = [f"{_label(r)} {r.change:+.2f}" for r in rows if r.change < -EPSILON]
    if down:
        return RuleResult("lenient", False, f"bucket mean(s) fell: {', '.join(down)}", {"up": up, "down": down})
    if not up:
        return RuleResult("lenient", False, "no bucket mean rose", {"up": up, "down": down})
    return RuleResult("lenient", True, f"rose: {', '.join(up)}; none fell", {"up": up, "down": down})
