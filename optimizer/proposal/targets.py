"""Which failures a prompt can change: the confusions the graders name, counted per bucket.

A grader that can say *what* went wrong, not only that it went wrong, puts it in its result's
details as `confusion`: `{"got": ..., "expected": ...}` (the card's template grader: `quote`
chosen where `event` was expected; the PKM completion grader: skipped where the note had to be
filed). A bucket whose failures repeat one such confusion is one a prompt rule can address
("a saying someone said is a quote, not an event"); a bucket whose trials fail for no named
reason (the agent ran out of turns, a fact was paraphrased away) is less so. Target selection
(`optimizer.proposal.request.select_targets`) therefore weighs a bucket's headroom by the share of it
that a named confusion explains, and the request shows the confusions to the patcher.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from optimizer.types import Trial

CONFUSION = "confusion"


@dataclass(frozen=True)
class Confusion:
    grader: str
    got: str
    expected: str

    def text(self) -> str:
        return f"{self.got} where {self.expected} was expected ({self.grader})"


def trial_confusions(trial: Trial) -> list[Confusion]:
    """The confusions the failed graders of one trial name (none for a trial that passed)."""
    found = []
    for result in trial.grader_results:
        named = result.details.get(CONFUSION) if not result.passed and not result.errored else None
        if isinstance(named, dict) and named.get("got") is not None and named.get("expected") is not None:
            found.append(Confusion(result.grader, str(named["got"]), str(named["expected"])))
    return found


def bucket_confusions(trials: list[Trial]) -> dict[tuple[str, str], Counter[Confusion]]:
    """Per (suite, bucket): how many failed train trials named each confusion."""
    counts: dict[tuple[str, str], Counter[Confusion]] = {}
    for trial in trials:
        if trial.status == "failed" and trial.split != "holdout":
            for confusion in trial_confusions(trial):
                counts.setdefault((trial.suite, trial.bucket), Counter())[confusion] += 1
    return counts


def confused_tasks(trials: list[Trial]) -> float:
    """The tasks of these trials (one bucket's) expected to fail per round with a named
    confusion: each task's share of trials that failed naming one, summed; the counterpart of
    `bucket_status`'s `failing`, so the two compare."""
    by_task: dict[str, list[Trial]] = {}
    for trial in trials:
        by_task.setdefault(trial.task_id, []).append(trial)
    return sum(sum(t.status == "failed" and bool(trial_confusions(t)) for t in runs) / len(runs)
               for runs in by_task.values())


def changeable(row: dict, confused: float) -> float:
    """A bucket's weight in target selection: its failing tasks per round, with the ones a named
    confusion explains counted twice. A bucket fully explained by confusions outranks one with
    up to twice its failures that no grader explains; with no confusions named anywhere the
    order is the headroom order alone."""
    return row["failing"] + confused


def prefers_named(target_order: str, agent_model: str) -> bool:
    """`target_order`: "changeable" weighs named confusions, "headroom" does not; "auto" weighs
    them for the embedded agent models, where the measured room was a confusion a rule fixes
    (quote sayings filed as events) and the failures without one were mostly turn limits."""
    from optimizer.models import is_embedded

    if target_order != "auto":
        return target_order == "changeable"
    return is_embedded(agent_model)


def top_confusions(counts: Counter[Confusion] | None, limit: int = 3) -> tuple[tuple[str, int], ...]:
    """The most frequent confusions of a bucket as (text, failed trials), for the request."""
    if not counts:
        return ()
    return tuple((confusion.text(), count) for confusion, count in
                 sorted(counts.items(), key=lambda item: (-item[1], item[0].text()))[:limit])
