"""The weak mode of `mock/patcher`: a stand-in patcher that knows `mock/sim`'s rules, but is not
always right (setting `mock_patcher_skill`).

It reads the targeted buckets from the request (`request.md` lists them as
`- **<suite>/<bucket>**: ...`), finds the agent whose sim profile has rule texts for them (the
agent the request names first), and draws what to answer from a generator seeded by the
settings' seed, the request text, the proposal ordinal and the attempt, so several candidates
of one iteration differ and a rerun of the same request reproduces:

* with probability `skill`, **right**: the targeted buckets' rules;
* with probability (1 - skill) / 4, **harmful**: those rules plus one harmful line drawn evenly
  from the contradictions of the agent's other buckets and every wording of the harmful effects
  of its effect library (`optimizer.trials.sim.Effect`) that move no targeted bucket: a harm named by
  its line, named by nothing, named wrongly, or spread over several buckets, so the gate must
  catch each kind;
* otherwise **useless**: one distractor, a plausible rule the sim ignores.

The texts are the profiles' `RuleTexts` (data files next to each profile), never written here.
Asked only for the kind of input (a guided contrast request, `optimizer.proposal.contrast`), it gives the
same sentences as one phrase (`WeakAnswer.phrase`).
`benchmarks/sim_patcher.py`, the always-right command proposer, reads them the same way.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from optimizer.run_ids import RUN_ID
from optimizer.trials.sim import RuleTexts

TARGET = re.compile(r"^- \*\*[^*/]+/([A-Za-z0-9_]+)\*\*:", re.MULTILINE)
AGENT = re.compile(r"^# Prompt patch request: (\S+)", re.MULTILINE)
HARM_SHARE = 0.25
"""Share of the wrong answers that are harmful; the rest are useless."""


def targeted_buckets(request: str) -> list[str]:
    """The buckets the request targets, in its order."""
    return list(dict.fromkeys(TARGET.findall(request)))


def rule_texts_for(buckets: list[str], agent_name: str | None = None) -> RuleTexts | None:
    """The rule texts of the agent owning every one of `buckets`: `agent_name` when it does,
    else the first such agent by name; None when no registered profile has texts for them all."""
    from optimizer.registry import agents

    owners = {name: entry.sim_profile.rule_texts for name, entry in sorted(agents().items())
              if entry.sim_profile and entry.sim_profile.rule_texts
              and buckets and all(bucket in entry.sim_profile.rule_texts.rules for bucket in buckets)}
    if agent_name in owners:
        return owners[agent_name]
    return next(iter(owners.values()), None)


@dataclass(frozen=True)
class WeakAnswer:
    kind: str
    """`right`, `harmful`, `useless`, or `none` (no profile knows the targeted buckets)."""
    rules: list[str] = field(default_factory=list)
    """The sentences to add to the prompt, in order."""
    targets: list[str] = field(default_factory=list)

    @property
    def phrase(self) -> str:
        """The answer to a guided contrast request, which asks for the kind of input only: the
        sentences as one phrase (each without its stop, joined by "; "), so the rule it completes
        holds the words `mock/sim` recognises (a harmful line included)."""
        return "; ".join(rule.rstrip(" .")[:1].lower() + rule.rstrip(" .")[1:] for rule in self.rules)


def harmful_lines(texts: RuleTexts, targets: list[str]) -> list[str]:
    """The lines a harmful answer adds one of: the other buckets' contradictions, then the
    wordings of the library's harmful effects that leave the targets alone."""
    lines = [texts.contradictions[bucket] for bucket in sorted(set(texts.contradictions) - set(targets))]
    lines += [text for effect in texts.effects if effect.harmful and not set(effect.change) & set(targets)
              for _, text in sorted(effect.wordings.items())]
    return lines


RUN_NAMES = re.compile(rf"{RUN_ID.pattern}|base commit `[0-9a-f]+`")
"""Run ids (`run_ids.RUN_ID`) and the base commit a request names (`request.md.j2`): they differ
from run to run of the same work, so with them the same seed would draw other answers."""


def draw(request: str, *, seed: int, ordinal: int, attempt: int) -> random.Random:
    """The generator one answer is drawn from: the same inputs give the same answer (the request
    without its surrounding whitespace, which prompt formats differ in, and without the names of
    its run, so a rerun at the same seed draws the same answers). The skill is left out, so with a
    higher skill every answer that was right stays right."""
    request_hash = hashlib.sha256(RUN_NAMES.sub("``", request.strip()).encode()).hexdigest()
    digest = hashlib.sha256(f"{seed}:{ordinal}:{attempt}:{request_hash}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def weak_answer(request: str, *, skill: float, seed: int, ordinal: int, attempt: int = 0) -> WeakAnswer:
    """What the weak patcher proposes for this request (see the module docstring)."""
    targets = targeted_buckets(request)
    named = AGENT.search(request)
    texts = rule_texts_for(targets, named.group(1) if named else None)
    if texts is None:
        return WeakAnswer("none", [], targets)
    rng = draw(request, seed=seed, ordinal=ordinal, attempt=attempt)
    value = rng.random()
    right = [texts.rules[bucket] for bucket in targets]
    if value < skill:
        return WeakAnswer("right", right, targets)
    harms = harmful_lines(texts, targets)
    if value < skill + (1 - skill) * HARM_SHARE and harms:
        return WeakAnswer("harmful", right + [rng.choice(harms)], targets)
    return WeakAnswer("useless", [rng.choice(texts.distractors)], targets)
