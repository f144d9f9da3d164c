"""The rule machinery behind `mock/sim`, a deterministic, prompt-sensitive simulated agent.

An agent registers a `SimProfile`: for each failure bucket a base pass rate and a `Rule`, the
general instruction that, when the system prompt states it, makes the simulated agent behave
well on that bucket. The profile also says what a *failing* agent does (e.g. pick a tempting
wrong template) by turning the task's reference tool calls into wrong ones.

How a rule is found in a prompt. The prompt is split into sentences (lines, and `. `/`; `
boundaries). A rule is *stated* when one sentence matches every one of the rule's concept
patterns (case-insensitive regular expressions). It is *contradicted* when such a sentence puts a
negation (`never`, `not`, `don't`, `do not`, `avoid`) within four words before the rule's first
concept (e.g. "never use event for meetings"). Text that matches no rule changes nothing.

Pass probability of a trial: the bucket's base rate; `stated_rate` (default 0.92) when the rule
is stated; `contradicted_rate` (default 0.08) when it is contradicted. Each trial draws one
number u in [0, 1) from sha256(seed, task id, trial index): the trial follows the reference
solution when u < p, else the failing behaviour. The same u is used before and after a prompt
change, so a stated rule can only turn failing trials into passing ones.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Callable

from optimizer.types import Task, ToolCallSpec

NEGATION = re.compile(r"\b(never|not|don't|dont|avoid)\b", re.IGNORECASE)
SENTENCE_SPLIT = re.compile(r"\n+|(?<=[.;!?])\s+")


@dataclass(frozen=True)
class Rule:
    """A general instruction, as a set of concepts that must co-occur in one sentence."""

    concepts: tuple[str, ...]
    description: str = ""

    def _patterns(self) -> list[re.Pattern]:
        return [re.compile(concept, re.IGNORECASE) for concept in self.concepts]

    def status(self, prompt: str) -> str:
        """`stated`, `contradicted` or `absent` in this prompt."""
        patterns = self._patterns()
        found = "absent"
        for sentence in SENTENCE_SPLIT.split(prompt):
            if not all(pattern.search(sentence) for pattern in patterns):
                continue
            head = patterns[0].search(sentence)
            before = sentence[: head.start()].split()[-4:]
            if NEGATION.search(" ".join(before)):
                return "contradicted"
            found = "stated"
        return found


@dataclass(frozen=True)
class SimProfile:
    """How `mock/sim` plays one agent."""

    rules: dict[str, Rule]
    base_rates: dict[str, float]
    failing_calls: Callable[[Task, random.Random], list[ToolCallSpec]]
    """The calls a failing agent makes for this task (may be empty: it never acts)."""
    default_rate: float = 0.5
    stated_rate: float = 0.92
    contradicted_rate: float = 0.08

    def pass_probability(self, task: Task, system_prompt: str) -> float:
        base = self.base_rates.get(task.bucket, self.default_rate)
        rule = self.rules.get(task.bucket)
        if rule is None:
            return base
        status = rule.status(system_prompt)
        if status == "stated":
            return max(base, self.stated_rate)
        if status == "contradicted":
            return min(base, self.contradicted_rate)
        return base


def trial_draw(seed: int, task_id: str, trial_index: int) -> tuple[float, random.Random]:
    """The trial's uniform number and a generator seeded from it, both reproducible."""
    digest = hashlib.sha256(f"{seed}:{task_id}:{trial_index}".encode()).digest()
    value = int.from_bytes(digest[:8], "big") / 2**64
    return value, random.Random(int.from_bytes(digest[8:16], "big"))


@dataclass
class SimDecision:
    passed: bool
    probability: float
    calls: list[ToolCallSpec] = field(default_factory=list)


def decide(profile: SimProfile, task: Task, system_prompt: str, seed: int, trial_index: int) -> SimDecision:
    probability = profile.pass_probability(task, system_prompt)
    value, rng = trial_draw(seed, task.id, trial_index)
    if value < probability:
        calls = list(task.reference_solution.tool_calls) if task.reference_solution else []
        return SimDecision(True, probability, calls)
    return SimDecision(False, probability, profile.failing_calls(task, rng))
