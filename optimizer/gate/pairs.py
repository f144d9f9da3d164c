"""Which trials pair up, and what each side of a pair counts for.

A pair is a (suite, task, trial index) run once with each prompt. `PairTable` collects the pairs
as `optimizer.comparison.compare` runs batches, in a fixed order the sequential tests read them
in; a side's value is `scoring.voting_value` and its verdict `scoring.voting_passed` (the judges
that do not vote left out of both), and a side the infrastructure spoiled is marked with its
side: it leaves its pair out of the values, and the errored rule asks whether such endings fall
on one prompt's side (`PairTable.unscored_counts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from optimizer.scoring import spoiled, voting_passed, voting_value
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
    before_spoiled: bool = False
    """The base prompt's trial ended the infrastructure's way (`scoring.spoiled`: its time ran
    out while the model was failing, silent or far slower than normal)."""
    after_spoiled: bool = False
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
            before.status == "errored", after.status == "errored", spoiled(before), spoiled(after),
            voting_passed(before, self.non_voting), voting_passed(after, self.non_voting)))

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

    def unscored_counts(self) -> "Unscored":
        """The pairs with a side that has no score (errored, the infrastructure's endings
        included), and of those the ones where only the candidate's or only the base's trial
        ended so, by kind."""
        pairs = sorted((pair for group in self.pairs.values() for pair in group), key=lambda pair: pair.order)
        count = Unscored(excluded=sum(1 for p in pairs if p.before_errored or p.after_errored))
        for p in pairs:
            if p.after_errored and not p.before_errored:
                if p.after_spoiled:
                    count.candidate_spoiled += 1
                else:
                    count.candidate_errored += 1
                count.signs.append(1.0)
            elif p.before_errored and not p.after_errored:
                if p.before_spoiled:
                    count.base_spoiled += 1
                else:
                    count.base_errored += 1
                count.signs.append(-1.0)
        return count


@dataclass
class Unscored:
    """Pairs left out because a side has no score, and the one-sided ones by side and kind
    (`errored`: a harness, grader or provider fault; `spoiled`: `scoring.spoiled`)."""

    excluded: int = 0
    candidate_errored: int = 0
    candidate_spoiled: int = 0
    base_errored: int = 0
    base_spoiled: int = 0
    signs: list[float] = field(default_factory=list)
    """Per one-sided pair, in the order the pairs were added: +1 candidate-only, -1 base-only."""

    @property
    def candidate_only(self) -> int:
        return self.candidate_errored + self.candidate_spoiled

    @property
    def base_only(self) -> int:
        return self.base_errored + self.base_spoiled
