"""The comparison's three phases: the targets, the rest, the harm checks (`optimizer.comparison.compare`'s
docstring gives the order and the stopping rules). Each is stepped the same way: `next_batch()`
names the trials to run next (None: the phase is over), `record()` takes back what they gave, and
`decision()` ends the comparison (a `Decision`) or lets the next phase start (None). A phase runs
nothing itself, so the one driver, `compare`, owns every call to the prompts' runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from optimizer.comparison.plan import PairPlan, floor_cost, floor_pairs
from optimizer.gate import (Decision, GatePolicy, PairTable, decide, errored_rejects, group_stats, groups_of,
                            harm_thresholds, improvement_status, is_named, leans, suspicious)
from optimizer.trials.runner import PlannedTrial
from optimizer.types import Trial

Bucket = tuple[str, str]


@dataclass
class Batch:
    """Trials to run next: the candidate's (`candidate`), the base prompt's at fresh indexes
    (`base`), and the base prompt's trials already run that pair with the candidate's (`held`:
    the baseline's reserve, or the whole baseline for the rest)."""

    label: str
    """What the runner is told the trials are for: targeted, rest or harm check."""
    note: str
    """The line logged before the batch runs."""
    candidate: list[PlannedTrial]
    base: list[PlannedTrial] = field(default_factory=list)
    held: list[Trial] = field(default_factory=list)


class Phase(Protocol):
    def next_batch(self) -> Batch | None:
        """The trials to run next, or None when this phase is over."""

    def record(self, before: list[Trial], after: list[Trial]) -> None:
        """The base prompt's trials (held and fresh) and the candidate's, of the last batch."""

    def decision(self) -> Decision | None:
        """The comparison's decision when this phase ends it, else None."""


@dataclass
class Comparing:
    """What the phases share: the pairs so far, where more come from, and the budget left."""

    policy: GatePolicy
    targets: list[Bucket]
    regression: set[str]
    named: frozenset[Bucket]
    """The buckets the patch names, when `name_weighting` is on (else none)."""
    planned: list[PlannedTrial]
    baseline: list[Trial]
    agent: str
    plan: PairPlan
    table: PairTable
    ran: Callable[[], int]
    """Trials run so far for this candidate (`Sides.ran`)."""
    capped: bool = False
    batches: int = 0
    safety: int = 0
    """Trials granted past the budget to the groups that would make an accept a proposal (the
    safety stage: `GatePolicy.safety_rollouts`, granted once)."""

    def is_target(self, item: PlannedTrial) -> bool:
        return (item.suite.name, item.task.bucket) in self.targets and item.task.split != "holdout"

    @property
    def rest(self) -> list[PlannedTrial]:
        """The changed agent's other planned trials, less the baseline's reserve."""
        return [item for item in self.planned
                if not self.is_target(item) and not item.reserve and item.suite.spec.agent_name == self.agent]

    def budget_left(self) -> int:
        return self.policy.budget(len(self.targets)) + self.safety - self.ran()

    def pairs(self, items: list[PlannedTrial], label: str, note: str) -> Batch:
        """A batch of pairs taken from the plan: a reserve index pairs with the baseline's trial,
        any other runs the base prompt too."""
        self.plan.take(items)
        held, fresh = [], []
        for item in items:
            trial = self.plan.reserved.get((item.suite.name, item.task.id, item.index))
            if trial is None:
                fresh.append(item)
            else:
                held.append(trial)
        return Batch(label, note, items, fresh, held)

    def add(self, before: list[Trial], after: list[Trial]) -> None:
        self.table.add_all(before, after, self.regression)
        self.batches += 1

    def decide(self, stage: str = "full") -> Decision:
        return decide(self.table, targets=self.targets, policy=self.policy, stage=stage, rollouts=self.ran(),
                      capped=self.capped, named=self.named)


class TargetPhase:
    """1. Fresh pairs of the targeted buckets, a batch at a time, until each is settled; what the
    rest and the harm floor need is held back from the budget."""

    def __init__(self, state: Comparing):
        self.state = state
        self.keys = {bucket: sorted({(i.suite.name, i.task.id) for i in state.planned
                                     if state.is_target(i) and (i.suite.name, i.task.bucket) == bucket})
                     for bucket in state.targets}
        rest = state.rest
        self.held_back = len(rest) + floor_cost(rest, state.regression, state.plan, state.policy, state.named)

    def next_batch(self) -> Batch | None:
        state = self.state
        open_buckets = self._open()
        if not open_buckets or (state.policy.mode == "lenient" and state.table.pairs):
            return None
        if state.table.pairs:
            room = (state.budget_left() - self.held_back) // (2 * len(open_buckets))
        else:
            room = state.policy.batch_pairs
        rounds = {bucket: max(1, len(self.keys[bucket])) for bucket in open_buckets}  # pairs per round
        sizes = {bucket: min(state.policy.batch_pairs, room) // rounds[bucket] * rounds[bucket]
                 for bucket in open_buckets}
        if not all(sizes.values()):
            state.capped = True  # not one more round of pairs fits beside what the rest and the floor need
            return None
        items = [item for bucket in open_buckets
                 for item in state.plan.fresh(self.keys[bucket], sizes[bucket], reserve=False)]
        if not items:
            return None
        note = (f"targets: {len(items)} fresh pairs (base prompt and candidate) of "
                f"{', '.join('/'.join(b) for b in open_buckets)}")
        return state.pairs(items, "targeted", note)

    def _open(self) -> list[Bucket]:
        """The targets more pairs could settle; none once any is futile, capped or unjudged."""
        state = self.state
        status = improvement_status(state.table, state.targets, state.policy) if state.table.pairs else {
            bucket: ("open", None) for bucket in state.targets}
        if any(verdict in ("futile", "capped", "unjudged") for verdict, _ in status.values()):
            return []
        return [bucket for bucket, (verdict, _) in status.items() if verdict == "open"]

    def record(self, before: list[Trial], after: list[Trial]) -> None:
        self.state.add(before, after)

    def decision(self) -> Decision | None:
        """Rejected here when a target was not shown improved (lenient: when none rose)."""
        state = self.state
        settled = improvement_status(state.table, state.targets, state.policy)
        if state.policy.mode == "lenient":
            passing = any(row.change > 0 for _, row in settled.values())
        else:
            passing = all(verdict == "improved" for verdict, _ in settled.values())
        return None if passing else state.decide("targeted")


class RestPhase:
    """2. The candidate runs the rest of the changed agent's suites once, each trial paired with
    the baseline's own at the same index."""

    def __init__(self, state: Comparing):
        self.state = state
        self.done = False

    def next_batch(self) -> Batch | None:
        rest = self.state.rest
        if self.done or not rest:
            return None
        self.done = True
        return Batch("rest", f"rest: {len(rest)} candidate trials (other buckets, holdout, regression)", rest,
                     held=self.state.baseline)

    def record(self, before: list[Trial], after: list[Trial]) -> None:
        self.state.table.add_all(before, after, self.state.regression)

    def decision(self) -> Decision | None:
        return None


SAFETY_PAIRS_FACTOR = 2
"""In the safety stage a leaning group may get up to this many times `max_bucket_pairs`."""


class HarmPhase:
    """3. Every harm group up to its floor of pairs, then more for the group likeliest harmed,
    until none is open, one is shown harmed, or the budget is spent (strict mode only)."""

    def __init__(self, state: Comparing):
        self.state = state
        groups = groups_of(state.table, state.targets, state.named)
        self.tested = [(label, keys, threshold, is_named((suite, label, kind), groups.named))
                       for (suite, label, kind, keys), threshold
                       in zip(groups.harm, harm_thresholds(groups, state.policy))]
        self.kinds = {label: kind for _, label, kind, _ in groups.harm}
        self.floor_done = False

    def next_batch(self) -> Batch | None:
        state = self.state
        while state.policy.mode == "strict":
            states = [(name, keys, threshold, named, group_stats(state.table, keys))
                      for name, keys, threshold, named in self.tested]
            if any(stats.harm_evalue >= threshold for _, _, threshold, _, stats in states):
                return None  # a significant drop: the candidate is rejected whatever else is found
            if errored_rejects(state.table, state.policy):
                return None  # its trials end unscored on its side: rejected, and more pairs would end so too
            if not self.floor_done:
                self.floor_done = True
                items, note = self._floor(states), ("harm check: every other bucket up to its minimum of pairs "
                                                            "(min_bucket_pairs)")
            else:
                leaning = self._leaning(states, proposing=bool(state.safety))
                if leaning is None and self._holdout_fell(states):
                    state.safety = state.policy.safety_rollouts  # a fallen holdout under `no_fall`: checked again
                    continue
                if leaning is None:
                    return None
                name, keys = leaning
                size = self._fitting(keys)
                if not size:
                    if not state.safety and state.policy.safety_rollouts and self._leaning(states, proposing=True):
                        state.safety = state.policy.safety_rollouts  # the safety stage, once
                        continue
                    state.capped = True
                    return None
                stage = " (safety stage)" if state.safety else ""
                items, note = state.plan.fresh(keys, size), f"harm check{stage}: {name}"
            if not items:
                continue
            if state.plan.cost(items) > state.budget_left():
                state.capped = True
                return None
            return state.pairs(items, "harm check", f"{note}: {len(items)} more pairs")
        return None

    def _floor(self, states: list) -> list[PlannedTrial]:
        """Pairs that bring every judged group up to its floor."""
        state = self.state
        return [item for _, keys, _, named, stats in states if not stats.unjudged
                for item in state.plan.fresh(keys, floor_pairs(state.policy, named)
                                             - sum(state.table.count(k) for k in keys))]

    def _leaning(self, states: list, proposing: bool = False) -> tuple[str, list[tuple[str, str]]] | None:
        """The open group whose mean score or pass rate fell most (a fallen named bucket first),
        or None when none is open. The pass rate counts as much as the score: a wrong-template
        card keeps most of its credit, so a bucket whose pass rate collapses can lose little mean
        score, and ordered by the score alone its pairs would go to a group that merely wobbles.
        `proposing`: only the open groups that would make the accept a proposal (`leans`), each up
        to twice `max_bucket_pairs` (the safety stage's pairs go where the decision's could not)."""
        table, policy = self.state.table, self.state.policy
        cap = policy.max_bucket_pairs * (SAFETY_PAIRS_FACTOR if proposing else 1)
        leaning = [((named and stats.fell > 0, stats.fell, -stats.change), name, keys)
                   for name, keys, _, named, stats in states
                   if (suspicious(stats, policy.clear_after) or (proposing and self._no_fall(name)))
                   and sum(table.count(k) for k in keys) < cap
                   and (not proposing or leans(stats.fell, stats.harm_evalue, policy, self.kinds.get(name, "")))]
        if not leaning:
            return None
        _, name, keys = max(leaning, key=lambda entry: entry[0])
        return name, keys

    def _no_fall(self, name: str) -> bool:
        return self.kinds.get(name) == "holdout" and self.state.policy.holdout_rule == "no_fall"

    def _holdout_fell(self, states: list) -> bool:
        """Under `holdout_rule = no_fall`, before the safety stage: the holdout fell by more than
        the margin although no group is left to check, so the accept would be a proposal; the
        safety stage gives it pairs (a chance fall drifts back, as any leaning group's)."""
        state = self.state
        return (not state.safety and bool(state.policy.safety_rollouts)
                and any(self._no_fall(name) and leans(stats.fell, stats.harm_evalue, state.policy, "holdout")
                        for name, _, _, _, stats in states)
                and self._leaning(states, proposing=True) is not None)

    def _fitting(self, keys: list[tuple[str, str]]) -> int:
        """Half a batch of pairs for a group, cut to the largest whole rounds the budget has room for."""
        state = self.state
        size = max(len(keys), state.policy.batch_pairs // 2)
        size -= size % len(keys)
        while size and state.plan.cost(state.plan.fresh(keys, size)) > state.budget_left():
            size -= len(keys)
        return size

    def record(self, before: list[Trial], after: list[Trial]) -> None:
        self.state.add(before, after)

    def decision(self) -> Decision | None:
        return self.state.decide()
