"""Screening for the search (`optimizer.proposal.search`): the sets of screening tasks and the
`ScreeningAdapter`, a `GEPAAdapter` over our runner that runs the agent with a candidate prompt
on train tasks at trial indexes of a range of its own (`SCREEN_INDEX` and up), so no screening
trial is ever one the gate later judges on."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from optimizer.proposal import gepa_adapter
from optimizer.scoring import trial_value
from optimizer.trials.runner import PlannedTrial
from optimizer.types import Trial

COMPONENT = "system_prompt"
"""The one component of a gepa candidate: the targeted agent's system prompt."""
SCREEN_INDEX = 1_000_000
"""First trial index of screening trials. The gate's fresh trials count up from the baseline's
trials (a few per task), so the two ranges never meet."""
MINIBATCH = 3
"""gepa's default reflection minibatch."""
TARGET_COPIES = 4
"""Each targeted task appears at least this often in the screening set (a one-task bucket would
otherwise be judged on one trial per candidate)."""
HARM_SCREENS = 4
"""A budget that affords this many screens of every train task also screens the other buckets
(a candidate that breaks one then ranks low); a smaller one screens the targets only and leaves
harm to the gate."""
RunTrials = Callable[[list[PlannedTrial], str, str], list[Trial]]
"""(planned trials, prompt text, label) -> trials, run through the normal runner."""
def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Example:
    """One screening instance for gepa: a train task (a copy number when a task is repeated)."""

    suite: str
    task_id: str
    copy: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return self.suite, self.task_id


def screening_sets(planned: list[PlannedTrial], targets: Iterable[tuple[str, str]], agent: str,
                   budget: int) -> tuple[list[Example], list[Example]]:
    """gepa's trainset (the targeted buckets' train tasks, repeated to fill a minibatch and
    `TARGET_COPIES`) and valset (those, plus one of every other train task of the agent when the
    budget affords `HARM_SCREENS` screens of them all)."""
    targets = set(targets)
    tasks: dict[tuple[str, str], PlannedTrial] = {}
    for item in planned:
        if item.task.split == "train" and item.suite.spec.agent_name == agent and item.suite.spec.kind == "capability":
            tasks.setdefault((item.suite.name, item.task.id), item)
    targeted = sorted(key for key, item in tasks.items() if (key[0], item.task.bucket) in targets)
    copies = max(TARGET_COPIES, math.ceil(MINIBATCH / max(1, len(targeted)))) if targeted else 0
    train = [Example(suite, task, copy) for copy in range(copies) for suite, task in targeted]
    others = sorted(key for key in tasks if key not in set(targeted))
    val = list(train)
    if budget >= HARM_SCREENS * (len(train) + len(others)):
        val += [Example(suite, task) for suite, task in others]
    return train, val


class ScreeningAdapter:
    """gepa's view of our runner (the `GEPAAdapter` protocol). See the module docstring."""

    propose_new_texts = None
    """Proposals come from `SearchProposer` (gepa's `custom_candidate_proposer`)."""

    def __init__(self, items: dict[tuple[str, str], PlannedTrial], run: RunTrials, *,
                 targets: Iterable[tuple[str, str]], failures: Callable[[list[Trial]], list[dict[str, Any]]]):
        self.items, self.run, self.failures = items, run, failures
        self.targets = set(targets)
        self.next_index: dict[str, int] = {}
        self.screened: list[tuple[str, str, int]] = []
        """Every screening trial (suite, task, index), for the record and the tests."""
        self.evaluations: dict[str, list[list[float]]] = {}
        """Per candidate (text sha), the scores of each batch it was evaluated on, in order."""
        self.last: tuple[str, list[float]] | None = None
        self.rollouts = 0
        self.confirmed: list[tuple[str, tuple[str, str], float]] = []
        """(prompt sha, task key, score) of every confirmation trial: fresh base-prompt trials of
        the targets, run before anything was proposed, so part of the base prompt's screening."""

    def plan(self, keys: list[tuple[str, str]]) -> list[PlannedTrial]:
        """One trial per key at the next unused screening index of its task."""
        out = []
        for key in keys:
            name = "/".join(key)
            index = self.next_index.get(name, SCREEN_INDEX)
            self.next_index[name] = index + 1
            item = self.items[key]
            out.append(PlannedTrial(item.suite, item.task, index))
        return out

    def trials(self, keys: list[tuple[str, str]], prompt: str, label: str) -> list[Trial]:
        planned = self.plan(keys)
        trials = self.run(planned, prompt, label)
        by_key = {(t.suite, t.task_id, t.index): t for t in trials}
        self.screened += [(p.suite.name, p.task.id, p.index) for p in planned]
        self.rollouts += len(planned)
        return [by_key[(p.suite.name, p.task.id, p.index)] for p in planned]

    def evaluate(self, batch: list[Example], candidate: dict[str, str], capture_traces: bool = False):
        prompt = candidate[COMPONENT]
        trials = self.trials([example.key for example in batch], prompt, f"screening {text_sha(prompt)[:8]}")
        scores = [trial_value(trial.score, trial.status) for trial in trials]
        self.evaluations.setdefault(text_sha(prompt), []).append(scores)
        self.last = (text_sha(prompt), scores)
        outputs = [(trial.suite, trial.task_id, trial.index) for trial in trials]
        return gepa_adapter.evaluation_batch(outputs, scores, trials if capture_traces else None)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch, components_to_update: list[str]):
        return {name: self.failures(list(eval_batch.trajectories or [])) for name in components_to_update}

    def confirm(self, prompt: str, keys: list[tuple[str, str]], trials: int) -> list[Trial]:
        """`trials` fresh screening trials of the base prompt spread over `keys` (whole rounds):
        whether a target the baseline saw failing still fails."""
        rounds = math.ceil(trials / len(keys)) if keys else 0
        keys = [key for _ in range(rounds) for key in keys]
        trials = self.trials(keys, prompt, "confirmation (base prompt)")
        self.confirmed += [(text_sha(prompt), key, trial_value(trial.score, trial.status))
                           for key, trial in zip(keys, trials)]
        return trials

    def get_adapter_state(self) -> dict[str, Any]:
        return {"next_index": dict(self.next_index)}

    def set_adapter_state(self, state: dict[str, Any]) -> None:
        for name, index in (state.get("next_index") or {}).items():
            self.next_index[name] = max(index, self.next_index.get(name, SCREEN_INDEX))
