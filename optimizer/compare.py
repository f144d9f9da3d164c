"""The one comparison procedure behind `optimizer run`, `nightly` and `noise`: which pairs to run,
in what order, and when to stop. `optimizer.gate` judges the pairs; this module decides what to
spend on them.

1. **Targets, sequentially.** Fresh pairs (trial indexes after the baseline's and after every
   other recorded trial of the base prompt that target selection saw, run once with each
   prompt) of the targeted buckets' train tasks, `batch_pairs` per bucket at a time, spread
   evenly over its tasks. After each batch the improvement test looks again (the betting test is
   valid at every look). A bucket stops when it is shown improved, when it reaches
   `max_target_pairs`, or for futility (not above zero after 16 pairs); the last batch is cut to
   the whole rounds that fit beside what the rest and the harm floor need. If a targeted bucket
   ends without being shown improved, the candidate is rejected here and nothing else runs.
2. **The rest.** The candidate runs every other task of the changed agent's suites (train,
   holdout, regression) at the baseline's trial indexes; each trial pairs with the baseline's.
   A task alone in its bucket pairs here only its usual trial count; the baseline's extra trials
   of it (`PlannedTrial.reserve`) wait for step 3.
3. **Harm, by power.** Every harm group gets at least `min_bucket_pairs` pairs, a bucket the
   patch names twice that. Its test's threshold is weighted toward the buckets the patch names
   (`gate.harm_thresholds`). Then, half a batch at a time, the open group whose mean score fell
   most (open: some pair changed, its bets on a drop have not lost half their stake, and it has
   fewer than `max_bucket_pairs` pairs; a fallen bucket the patch names goes before any other)
   gets more pairs, until no group is open, one is shown harmed, or the proposal's budget
   (`max_rollouts` trials, plus `extra_target_rollouts` per target after the first) is spent.
   More pairs of a task come from the baseline's reserve first (the candidate's trial is the only
   cost), then from fresh indexes (both prompts).

Base-prompt trials at fresh indexes are shared by every candidate of an iteration (the `Sides`
object caches them) and, through the loop's base pool, by later iterations on the same base
prompt, so a later candidate pays only for its own side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from optimizer.gate import (Decision, GatePolicy, PairTable, decide, group_stats, groups_of, harm_group,
                            harm_thresholds, improvement_status, is_named, named_buckets, suspicious)
from optimizer.patch import changed_lines
from optimizer.runner import PlannedTrial
from optimizer.types import Trial

Log = Callable[[str], None]
NAMED_FLOOR = 2
"""A harm group the patch names gets this many times `min_bucket_pairs` before its test looks."""


def policy_from(settings) -> GatePolicy:
    """The gate's policy from `Settings` (fields of the same names)."""
    return GatePolicy(mode=settings.gate, alpha=settings.alpha, alpha_harm=settings.alpha_harm,
                      max_bucket_drop=settings.max_bucket_drop, batch_pairs=settings.batch_pairs,
                      max_target_pairs=settings.max_target_pairs, min_bucket_pairs=settings.min_bucket_pairs,
                      max_bucket_pairs=settings.max_bucket_pairs, max_rollouts=settings.max_rollouts,
                      extra_target_rollouts=settings.extra_target_rollouts)


def buckets_named(diff: str, planned: list[PlannedTrial], agent: str,
                  asked: Iterable[tuple[str, str]] = ()) -> frozenset[tuple[str, str]]:
    """The train buckets of `agent` that a patch (a unified diff) names in the lines it adds or
    removes (`gate.named_buckets`), less the ones its request `asked` it to change: `compare`'s
    `named`."""
    added, removed = changed_lines(diff)
    named = named_buckets(added + removed, {(item.suite.name, item.task.bucket) for item in planned
                                            if item.suite.spec.agent_name == agent and item.task.split == "train"})
    return named - frozenset(asked)


class Sides(Protocol):
    """Runs trials with the base prompt or the candidate prompt."""

    def base(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        """Base-prompt trials at fresh indexes (may serve ones run before from a cache)."""

    def candidate(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        """Candidate-prompt trials."""

    def ran(self) -> int:
        """Trials actually run so far for this candidate (cache-served base trials excluded)."""


@dataclass
class Comparison:
    decision: Decision
    rollouts: int = 0
    batches: int = 0


class _Plan:
    """Trial indexes for more pairs per task: the baseline's reserve first (base side already run),
    then fresh indexes after the baseline's and after `seen` (where the base prompt's recorded
    trials end)."""

    def __init__(self, planned: list[PlannedTrial], baseline: list[Trial],
                 seen: dict[tuple[str, str], int] | None = None):
        self.items: dict[tuple[str, str], PlannedTrial] = {}
        self.next_index: dict[tuple[str, str], int] = dict(seen or {})
        self.reserve: dict[tuple[str, str], list[int]] = {}
        run = {(t.suite, t.task_id, t.index): t for t in baseline}
        self.reserved: dict[tuple[str, str, int], Trial] = {}
        """Reserve trials of the baseline, by (suite, task, index): a pair on one costs the candidate's trial."""
        for item in planned:
            key = (item.suite.name, item.task.id)
            self.items.setdefault(key, item)
            self.next_index[key] = max(self.next_index.get(key, 0), item.index + 1)
            trial = run.get((*key, item.index))
            if item.reserve and trial is not None and trial.status != "errored":
                self.reserve.setdefault(key, []).append(item.index)
                self.reserved[(*key, item.index)] = trial

    def fresh(self, keys: list[tuple[str, str]], pairs: int, *, reserve: bool = True) -> list[PlannedTrial]:
        """`pairs` more trials spread evenly (whole rounds) over `keys`, the baseline's reserve
        first unless `reserve` is false (targets: the baseline chose them, so only trials it has
        not seen may judge them). Nothing is taken until `take`."""
        if not keys or pairs <= 0:
            return []
        per_task = math.ceil(pairs / len(keys))
        out = []
        for key in keys:
            item = self.items[key]
            spare = self.reserve.get(key, []) if reserve else []
            indexes = spare[:per_task]
            start = self.next_index[key]
            indexes += range(start, start + per_task - len(indexes))
            out += [PlannedTrial(item.suite, item.task, index) for index in indexes]
        return out

    def take(self, items: list[PlannedTrial]) -> None:
        for item in items:
            key = (item.suite.name, item.task.id)
            if (*key, item.index) in self.reserved:
                self.reserve[key].remove(item.index)
            else:
                self.next_index[key] = max(self.next_index[key], item.index + 1)

    def cost(self, items: list[PlannedTrial]) -> int:
        """Trials a batch runs: the candidate's, and the base prompt's where the reserve has none."""
        return sum(1 if (item.suite.name, item.task.id, item.index) in self.reserved else 2 for item in items)


def floor_pairs(policy: GatePolicy, named: bool) -> int:
    """The pairs a harm group gets before its test looks: `min_bucket_pairs`, twice that for a
    bucket the patch names (one bet that goes the wrong way would otherwise clear it)."""
    return policy.min_bucket_pairs * (NAMED_FLOOR if named else 1)


def _floor_cost(rest: list[PlannedTrial], regression: set[str], plan: _Plan, policy: GatePolicy,
                named: frozenset[tuple[str, str]]) -> int:
    """Trials the harm groups' pairs up to their floor cost (in whole rounds per task)."""
    if policy.mode != "strict":
        return 0
    groups: dict[tuple[str, str, str], dict[tuple[str, str], int]] = {}
    for item in rest:
        group = harm_group(item.suite.name, item.task.bucket, item.task.split, item.suite.name in regression)
        tasks = groups.setdefault(group, {})
        key = (item.suite.name, item.task.id)
        tasks[key] = tasks.get(key, 0) + 1
    need = 0
    for (suite, label, kind), tasks in groups.items():
        missing = floor_pairs(policy, is_named((suite, label, kind), named)) - sum(tasks.values())
        if missing > 0:
            need += plan.cost(plan.fresh(sorted(tasks), missing))
    return need


def compare(sides: Sides, *, planned: list[PlannedTrial], baseline: list[Trial], targets: Iterable[tuple[str, str]],
            agent: str, regression_suites: Iterable[str] = (), policy: GatePolicy = GatePolicy(),
            non_voting: Iterable[str] = (), log: Log = lambda message: None,
            seen: dict[tuple[str, str], int] | None = None, named: Iterable[tuple[str, str]] = ()) -> Comparison:
    """Compare the candidate with the base prompt; see the module docstring for the order.
    `seen`: per (suite, task), the first trial index no recorded trial of the base prompt holds
    (fresh pairs start there, so a fresh base trial is never one that target selection saw).
    `named`: the (suite, bucket)s the patch's changed lines name (`buckets_named`), whose harm
    tests get a larger share of `alpha_harm`, twice the floor of pairs and the next pairs first."""
    targets = sorted(set(targets))
    budget = policy.budget(len(targets))
    regression = set(regression_suites)
    table = PairTable(non_voting)
    plan = _Plan(planned, baseline, seen)
    result = Comparison(decision=None)  # type: ignore[arg-type]

    def is_target(item: PlannedTrial) -> bool:
        return (item.suite.name, item.task.bucket) in targets and item.task.split != "holdout"

    target_keys = {bucket: sorted({(i.suite.name, i.task.id) for i in planned
                                   if is_target(i) and (i.suite.name, i.task.bucket) == bucket})
                   for bucket in targets}
    rest = [item for item in planned
            if not is_target(item) and not item.reserve and item.suite.spec.agent_name == agent]

    def run_pairs(items: list[PlannedTrial], label: str) -> None:
        plan.take(items)
        held, fresh = [], []
        for item in items:
            trial = plan.reserved.get((item.suite.name, item.task.id, item.index))
            if trial is None:
                fresh.append(item)
            else:
                held.append(trial)
        base = held + (sides.base(fresh, label) if fresh else [])
        after = sides.candidate(items, label)
        table.add_all(base, after, regression)
        result.batches += 1

    def budget_left() -> int:
        return budget - sides.ran()

    # 1. targets, in batches, until each is settled; what the rest and the harm floor need is held back
    named = frozenset(named) if policy.name_weighting else frozenset()
    held_back = len(rest) + _floor_cost(rest, regression, plan, policy, named)
    capped = False
    while True:
        status = improvement_status(table, targets, policy) if table.pairs else {
            bucket: ("open", None) for bucket in targets}
        open_buckets = [bucket for bucket, (state, _) in status.items() if state == "open"]
        if not open_buckets or any(state in ("futile", "capped", "unjudged") for state, _ in status.values()):
            break
        if policy.mode == "lenient" and table.pairs:
            break
        room = (budget_left() - held_back) // (2 * len(open_buckets)) if table.pairs else policy.batch_pairs
        rounds = {bucket: max(1, len(target_keys[bucket])) for bucket in open_buckets}  # pairs per round
        sizes = {bucket: min(policy.batch_pairs, room) // rounds[bucket] * rounds[bucket] for bucket in open_buckets}
        if not all(sizes.values()):
            capped = True  # not one more round of pairs fits beside what the rest and the floor need
            break
        batch = [item for bucket in open_buckets
                 for item in plan.fresh(target_keys[bucket], sizes[bucket], reserve=False)]
        if not batch:
            break
        log(f"targets: {len(batch)} fresh pairs of {', '.join('/'.join(b) for b in open_buckets)}")
        run_pairs(batch, "targeted")
    settled = improvement_status(table, targets, policy)
    if policy.mode == "lenient":
        passing = any(row.change > 0 for _, row in settled.values())
    else:
        passing = all(state == "improved" for state, _ in settled.values())
    if not passing:
        result.rollouts = sides.ran()
        result.decision = decide(table, targets=targets, policy=policy, stage="targeted", rollouts=result.rollouts,
                                 capped=capped, named=named)
        return result

    # 2. the rest of the changed agent's suites, paired with the baseline's own trials
    if rest:
        log(f"rest: {len(rest)} candidate trials (other buckets, holdout, regression)")
        after = sides.candidate(rest, "rest")
        table.add_all(baseline, after, regression)

    # 3. harm groups: a floor of pairs each, then more for the likeliest harmed
    groups = groups_of(table, targets, named)
    tested = [(label, keys, threshold, is_named((suite, label, kind), groups.named))
              for (suite, label, kind, keys), threshold in zip(groups.harm, harm_thresholds(groups, policy))]
    floor_done = False
    while policy.mode == "strict":
        states = [(name, keys, threshold, named_group, group_stats(table, keys))
                  for name, keys, threshold, named_group in tested]
        if any(stats.harm_evalue >= threshold for _, _, threshold, _, stats in states):
            break  # a significant drop: the candidate is rejected whatever else is found
        if not floor_done:
            floor_done = True
            batch = [item for _, keys, _, named_group, stats in states if not stats.unjudged
                     for item in plan.fresh(keys, floor_pairs(policy, named_group) - sum(table.count(k) for k in keys))]
            label = "harm check: pairs up to the floor"
        else:
            leaning = [((named_group and stats.change < 0, -stats.change), name, keys)
                       for name, keys, _, named_group, stats in states
                       if suspicious(stats, policy.clear_after)
                       and sum(table.count(k) for k in keys) < policy.max_bucket_pairs]
            if not leaning:
                break
            _, name, keys = max(leaning, key=lambda entry: entry[0])
            size = max(len(keys), policy.batch_pairs // 2)
            size -= size % len(keys)
            while size and plan.cost(plan.fresh(keys, size)) > budget_left():
                size -= len(keys)  # the largest whole rounds that fit
            if not size:
                capped = True
                break
            batch, label = plan.fresh(keys, size), f"harm check: {name}"
        if not batch:
            continue
        if plan.cost(batch) > budget_left():
            capped = True
            break
        log(f"{label}: {len(batch)} more pairs")
        run_pairs(batch, "harm check")
    result.rollouts = sides.ran()
    result.decision = decide(table, targets=targets, policy=policy, rollouts=result.rollouts, capped=capped,
                             named=named)
    return result
