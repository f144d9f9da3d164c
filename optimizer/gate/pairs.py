"""Which trials pair up, and what each side of a pair counts for.

A pair is a (suite, task, trial index) run once with each prompt. `PairTable` collects the pairs
as `optimizer.compare` runs batches, in a fixed order the sequential tests read them in; a side's
value is `scoring.voting_value` (the judges that do not vote left out), and a side the
infrastructure spoiled is marked so that neither prompt is held to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from optimizer.scoring import spoiled, voting_value
from optimizer.types import Trial


@dataclass
class Pair:
    order: int
    """When the pair was added: the tests read the changes in this order."""
    index: int
    before: float | None
    after: float | None
    before_errored: bool
    after_errored: bool
    spoiled: bool = False
    """A side was spoiled by the infrastructure (`scoring.spoiled`): left out, and not held
    against either prompt by the errored rule."""
    before_passed: bool = False
    after_passed: bool = False

    @property
    def usable(self) -> bool:
        return self.before is not None and self.after is not None

    @property
    def diff(self) -> float:
        return self.after - self.before


@dataclass(frozen=True)
class TaskKey:
    suite: str
    task_id: str
    bucket: str
    split: str
    regression: bool = False


class PairTable:
    """The pairs collected so far, by task."""

    def __init__(self, non_voting: Iterable[str] = ()):
        self.non_voting = frozenset(non_voting)
        self.tasks: dict[tuple[str, str], TaskKey] = {}
        self.pairs: dict[tuple[str, str], list[Pair]] = {}
        self.added = 0

    def add(self, before: Trial, after: Trial, *, regression: bool = False) -> None:
        key = (before.suite, before.task_id)
        self.tasks.setdefault(key, TaskKey(before.suite, before.task_id, before.bucket, before.split, regression))
        self.added += 1
        self.pairs.setdefault(key, []).append(Pair(
            self.added, before.index, voting_value(before, self.non_voting), voting_value(after, self.non_voting),
            before.status == "errored", after.status == "errored", spoiled(before) or spoiled(after),
            before.status == "passed", after.status == "passed"))

    def add_all(self, before: Iterable[Trial], after: Iterable[Trial], regression: set[str] = frozenset()) -> int:
        """Pair trials by (suite, task, index); returns how many pairs were added. Pairs are added
        in (suite, task, index) order, not the order trials finished in, so the tests (which read
        changes in the order they were added) do not depend on scheduling or on a resume."""
        by_key = {(t.suite, t.task_id, t.index): t for t in before}
        added = 0
        for trial in sorted(after, key=lambda t: (t.suite, t.task_id, t.index)):
            match = by_key.get((trial.suite, trial.task_id, trial.index))
            if match is not None:
                self.add(match, trial, regression=trial.suite in regression)
                added += 1
        return added

    def count(self, key: tuple[str, str]) -> int:
        return len(self.pairs.get(key, []))

    def keys(self, *, suite: str | None = None, bucket: str | None = None, split: str | None = None,
             regression: bool | None = None) -> list[tuple[str, str]]:
        return sorted(key for key, task in self.tasks.items()
                      if (suite is None or task.suite == suite) and (bucket is None or task.bucket == bucket)
                      and (split is None or task.split == split)
                      and (regression is None or task.regression == regression))

    def errored_counts(self) -> tuple[int, int, int]:
        """(pairs with an errored side, candidate-only errored, base-only errored); a spoiled pair
        counts in the first only: a slow machine says nothing of either prompt."""
        pairs = [pair for group in self.pairs.values() for pair in group]
        judged = [pair for pair in pairs if not pair.spoiled]
        return (sum(1 for p in pairs if p.before_errored or p.after_errored),
                sum(1 for p in judged if p.after_errored and not p.before_errored),
                sum(1 for p in judged if p.before_errored and not p.after_errored))
