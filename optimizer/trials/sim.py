"""The rule machinery behind `mock/sim`, a deterministic, prompt-sensitive simulated agent.

An agent registers a `SimProfile`: for each failure bucket a base pass rate and a `Rule`, the
general instruction that, when the system prompt states it, makes the simulated agent behave
well on that bucket. The profile also says what a *failing* agent does (e.g. pick a tempting
wrong template) by turning the task's reference tool calls into wrong ones.

How a rule is found in a prompt. The prompt is split into sentences (lines, and `. `/`; `
boundaries). A rule is *stated* when one sentence matches every one of the rule's concept
patterns (case-insensitive regular expressions). Such a sentence instead *contradicts* the rule
when, before the first match of the rule's first concept (its *head*):

* a negation (`never`, `not`, `don't`, `do not`, `avoid`) is among the four words right before
  the head, and no `but` stands between that negation and the head ("never use event for
  meetings" contradicts; "do not paraphrase but keep times ... exactly" states: "not X but Y"
  affirms Y); or
* `rather than` or `instead of` comes earlier in the head's clause, i.e. with no `,`, `:` or `;`
  between it and the head ("rewrite times ... in your own words rather than keep them exactly"
  contradicts; "keep times ... exactly rather than paraphrasing them" states, the rule coming
  first; so does "rather than paraphrase them, keep times ... exactly", a clause of its own).

One contradicting sentence outweighs any number of stating ones. Text that matches no rule
changes nothing.

Pass probability of a trial: the bucket's base rate; `stated_rate` (default 0.92) when the rule
is stated; `contradicted_rate` (default 0.08) when it is contradicted. Each trial draws one
number u in [0, 1) and follows the reference solution when u < p, else the failing behaviour.
The noise mode (setting `sim_noise`) decides what u is drawn from:

* `paired` (default): sha256(seed, task id, trial index). The same u is used before and after a
  prompt change, so a stated rule can only turn failing trials into passing ones: baseline and
  candidate share their randomness, which makes comparisons easier than on a real model.
* `independent`: the same, plus a hash of the system prompt. A changed prompt gets independent
  draws at its own rate, as a real model sampled at temperature > 0 would; the same prompt,
  seed and trial index still reproduce exactly.

`RuleTexts` (a JSON file next to each profile) holds, per bucket, a sentence the sim scores as
stating the rule and one it scores as contradicting it, plus distractors that touch no bucket:
what stand-in patchers write (`benchmarks/sim_patcher.py`, the weak `mock/patcher`).
`check_rule_texts` says whether the texts still score that way against the profile's rules.

**Effects** (the file's optional `effects`): a library of lines whose effect on the pass rate
does not follow from their words. Each effect moves one or several buckets' pass rates by a
graded amount (e.g. -0.20 on three buckets for "keep every card short") and is written in
several wordings: `named` (names a bucket it moves), `unnamed` (names no bucket), `other`
(names a bucket it does not move). An effect is active when one of its wordings appears in the
prompt (case-insensitive); its changes add to the rate the rules give, clipped to [0, 1]. None
of the wordings states or contradicts a rule, so with no effect line in the prompt the profile
plays as it always did. The file's `length` (`cost_per_100_words` past `free_words`) lowers every
bucket a little for a long prompt.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from optimizer.errors import InputError
from optimizer.types import Task, ToolCallSpec

NEGATION = re.compile(r"\b(never|not|don't|dont|avoid)\b", re.IGNORECASE)
BUT = re.compile(r"\bbut\b", re.IGNORECASE)
CONTRAST = re.compile(r"\b(rather than|instead of)\b", re.IGNORECASE)
CLAUSE_BREAK = re.compile(r"[,:;]")
NEGATION_WINDOW = 4
"""Words before a rule's head in which a negation contradicts it."""
SENTENCE_SPLIT = re.compile(r"\n+|(?<=[.;!?])\s+")
NOISE_MODES: tuple[str, ...] = ("paired", "independent")


def _contradicts(before: str) -> bool:
    """Whether the text of a sentence before a rule's head turns the rule around (see above)."""
    window = " ".join(before.split()[-NEGATION_WINDOW:])
    if NEGATION.search(BUT.split(window)[-1]):
        return True
    return CONTRAST.search(CLAUSE_BREAK.split(before)[-1]) is not None


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
            if _contradicts(sentence[: head.start()]):
                return "contradicted"
            found = "stated"
        return found


class _RuleTextsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    class Bucket(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        rule: str
        contradiction: str

    class Effect(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        name: str
        change: dict[str, float] = Field(min_length=1)
        wordings: dict[str, str] = Field(min_length=1)

    class Length(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        free_words: int = Field(ge=0)
        cost_per_100_words: float = Field(ge=0.0, le=0.1)

    buckets: dict[str, Bucket]
    distractors: list[str] = Field(min_length=1)
    effects: list[Effect] = Field(default_factory=list)
    length: Length | None = None


WORDING_KINDS = ("named", "unnamed", "other")
"""How an effect's wordings relate to the buckets it moves: one names a moved bucket, one names
no bucket, one names a bucket it does not move."""


@dataclass(frozen=True)
class Effect:
    """A line whose effect on pass rates does not follow from its words (see the module docstring)."""

    name: str
    change: dict[str, float]
    """Per bucket, the change of its pass rate while the line is in the prompt."""
    wordings: dict[str, str]
    """Per kind (`WORDING_KINDS`), one way of writing the line."""

    @property
    def harmful(self) -> bool:
        return any(value < 0 for value in self.change.values())

    def active(self, prompt: str) -> bool:
        lowered = prompt.lower()
        return any(text.lower() in lowered for text in self.wordings.values())


@dataclass(frozen=True)
class RuleTexts:
    """Sentences about one agent's buckets, as the sim scores them (see the module docstring)."""

    rules: dict[str, str]
    """Per bucket, a general rule the sim scores as stated."""
    contradictions: dict[str, str]
    """Per bucket, a natural sentence the sim scores as contradicting that bucket's rule."""
    distractors: tuple[str, ...]
    """Plausible rules that state or contradict no bucket's rule."""
    source: Path | None = None
    effects: tuple[Effect, ...] = ()
    """The effect library: lines whose effects do not follow from their words."""
    free_words: int | None = None
    """Words of prompt that cost nothing (None: length costs nothing)."""
    cost_per_100_words: float = 0.0
    """Pass-rate cost, every bucket, per 100 words past `free_words`."""


def load_rule_texts(path: Path) -> RuleTexts:
    """Read a rule-texts file: `{"buckets": {bucket: {"rule", "contradiction"}}, "distractors": [...]}`."""
    try:
        data = _RuleTextsFile.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        error = exc.errors()[0]
        raise InputError(error["msg"], path=path, field=".".join(str(part) for part in error["loc"]),
                         fix='{"buckets": {"<bucket>": {"rule": "...", "contradiction": "..."}}, '
                             '"distractors": ["..."]}') from None
    effects = tuple(Effect(item.name, dict(item.change), dict(item.wordings)) for item in data.effects)
    for effect in effects:
        unknown = sorted((set(effect.change) - set(data.buckets)) | (set(effect.wordings) - set(WORDING_KINDS)))
        if unknown:
            raise InputError(f"effect {effect.name!r} names unknown bucket(s) or wording kind(s): "
                             f"{', '.join(unknown)}", path=path, field=f"effects.{effect.name}",
                             fix=f"use the file's buckets and the wording kinds {', '.join(WORDING_KINDS)}")
    return RuleTexts(rules={bucket: texts.rule for bucket, texts in data.buckets.items()},
                     contradictions={bucket: texts.contradiction for bucket, texts in data.buckets.items()},
                     distractors=tuple(data.distractors), source=path, effects=effects,
                     free_words=data.length.free_words if data.length else None,
                     cost_per_100_words=data.length.cost_per_100_words if data.length else 0.0)


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
    rule_texts: RuleTexts | None = None
    """What a stand-in patcher writes for this agent's buckets (None: it has nothing to write)."""

    def pass_probability(self, task: Task, system_prompt: str) -> float:
        """The rule's rate (base, stated or contradicted), moved by the active effects and the
        length cost of the rule texts' library, clipped to [0, 1]."""
        rate = self._rule_rate(task.bucket, system_prompt)
        texts = self.rule_texts
        if texts is None:
            return rate
        rate += sum(effect.change.get(task.bucket, 0.0) for effect in texts.effects if effect.active(system_prompt))
        if texts.free_words is not None:
            rate -= texts.cost_per_100_words * max(0, len(system_prompt.split()) - texts.free_words) / 100
        return min(1.0, max(0.0, rate))

    def _rule_rate(self, bucket: str, system_prompt: str) -> float:
        base = self.base_rates.get(bucket, self.default_rate)
        rule = self.rules.get(bucket)
        if rule is None:
            return base
        status = rule.status(system_prompt)
        if status == "stated":
            return max(base, self.stated_rate)
        if status == "contradicted":
            return min(base, self.contradicted_rate)
        return base

    def play(self, task: Task, system_prompt: str, seed: int, trial_index: int,
             noise: str = "paired") -> list[ToolCallSpec]:
        """The tool calls `mock/sim` makes for one trial under `system_prompt` (see `decide`)."""
        return decide(self, task, system_prompt, seed, trial_index, noise).calls


def check_rule_texts(profile: SimProfile) -> list[str]:
    """Why the profile's rule texts do not score as they claim (empty when they all do): every
    bucket's `rule` is stated and its `contradiction` contradicted for that bucket alone, and no
    distractor or effect wording touches any bucket's rule."""
    texts = profile.rule_texts
    if texts is None:
        return ["the profile has no rule texts"]
    problems = [f"{bucket}: no rule text" for bucket in profile.rules if bucket not in texts.rules]
    problems += [f"{bucket}: rule text for a bucket the profile has no rule for"
                 for bucket in texts.rules if bucket not in profile.rules]
    claims = [(text, bucket, "stated") for bucket, text in texts.rules.items()]
    claims += [(text, bucket, "contradicted") for bucket, text in texts.contradictions.items()]
    claims += [(text, None, "absent") for text in texts.distractors]
    claims += [(text, None, "absent") for effect in texts.effects for text in effect.wordings.values()]
    for text, own, wanted in claims:
        for bucket, rule in profile.rules.items():
            expected = wanted if bucket == own else "absent"
            found = rule.status(text)
            if found != expected:
                problems.append(f"{bucket}: {text!r} is {found}, not {expected}")
    return problems


def trial_draw(seed: int, task_id: str, trial_index: int, prompt_key: str = "") -> tuple[float, random.Random]:
    """The trial's uniform number and a generator seeded from it, both reproducible. A
    `prompt_key` (independent noise) gives each prompt draws of its own."""
    source = f"{seed}:{task_id}:{trial_index}" + (f":{prompt_key}" if prompt_key else "")
    digest = hashlib.sha256(source.encode()).digest()
    value = int.from_bytes(digest[:8], "big") / 2**64
    return value, random.Random(int.from_bytes(digest[8:16], "big"))


def prompt_key(system_prompt: str, noise: str) -> str:
    """What of the prompt enters the draw: nothing when `paired`, its hash when `independent`."""
    if noise not in NOISE_MODES:
        raise ValueError(f"unknown sim noise mode {noise!r}; known: {', '.join(NOISE_MODES)}")
    return hashlib.sha256(system_prompt.encode()).hexdigest()[:16] if noise == "independent" else ""


@dataclass
class SimDecision:
    passed: bool
    probability: float
    calls: list[ToolCallSpec] = field(default_factory=list)


def decide(profile: SimProfile, task: Task, system_prompt: str, seed: int, trial_index: int,
           noise: str = "paired") -> SimDecision:
    probability = profile.pass_probability(task, system_prompt)
    value, rng = trial_draw(seed, task.id, trial_index, prompt_key(system_prompt, noise))
    if value < probability:
        calls = task.reference_calls()
        return SimDecision(True, probability, calls)
    return SimDecision(False, probability, profile.failing_calls(task, rng))
