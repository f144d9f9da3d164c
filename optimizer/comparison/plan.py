"""Where a comparison's next pairs of a task come from, and what they cost: the baseline's reserve
first (its base side already run, so a pair costs only the candidate's trial), then fresh trial
indexes after the baseline's and after every recorded trial of the base prompt (both prompts run);
and what the harm groups' floor of pairs costs before any pair is run."""

from __future__ import annotations

import math

from optimizer.gate import GatePolicy, harm_group, is_named
from optimizer.trials.runner import PlannedTrial
from optimizer.types import Trial

NAMED_FLOOR = 2
"""A harm group the patch names gets this many times `min_bucket_pairs` before its test looks."""


class PairPlan:
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
        """Mark `items` as run: a reserve index leaves the reserve, a fresh one moves the next index on."""
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


def floor_cost(rest: list[PlannedTrial], regression: set[str], plan: PairPlan, policy: GatePolicy,
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
