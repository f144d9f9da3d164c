"""The `llm` proposer: a dspy module on the patcher model answers the request with a rationale
and exact edits, or one rule (`patch_format`); an answer that does not apply or fails the loop's
checks is sent back once with the reason (see `optimizer.proposal.proposers`)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Callable

from optimizer.errors import first_line
from optimizer.ledger import charged, estimate_tokens
from optimizer.models import mock
from optimizer.models._context import PROPOSAL_KEY, SCRIPT_KEY, SEED_KEY, SKILL_KEY
from optimizer.models._dspy import dspy_lm, lm_usage
from optimizer.proposal.contrast import complete, kind_of, kind_problem, rule_to_complete
from optimizer.proposal.patch import Edit, EditError, apply_edits
from optimizer.proposal.proposers import Proposal, ProposalRequest
from optimizer.proposal.weak_patcher import weak_answer

FEEDBACK = Path(__file__).parent.parent / "templates" / "patcher_feedback.md"
"""What the patcher is told when its edits do not apply (once, before the proposal is given up)."""
CHECK_FEEDBACK = Path(__file__).parent.parent / "templates" / "patcher_check_feedback.md"
"""What the patcher is told when its patch applies but would be rejected before any rollout."""
RULE_TOO_LONG = Path(__file__).parent.parent / "templates" / "patcher_rule_too_long.md"
"""The reason given (in CHECK_FEEDBACK) when a one-rule answer is longer than one rule."""
ATTEMPTS = 2
SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
MAX_RULE_SENTENCES = 3
"""The rule format asks for one or two sentences; one more is let through, a list of rules or a
model repeating itself is sent back."""
MAX_ANSWER_TOKENS = {"edits": 2000, "rule": 600, "contrast": 600, "kind": 150}
"""A rationale and edits within the 40-line budget (or a rationale and one rule, or a kind of
input) fit in well under this; the cap stops a small model that repeats itself from generating
for minutes."""
RULE_FORMATS = ("rule", "contrast", "kind")
"""The answers that are one rule appended to the prompt (`kind`: the guided contrast request's
rule, completed with the kind of input the patcher names)."""


class LLMProposer:
    name = "llm"
    note = ""
    confined = True

    def __init__(self, model: str, *, script: str | None = None, skill: float | None = None, seed: int = 0,
                 temperature: float = 0.0, sample_temperature: float = 0.0, retry_attempts: int,
                 patch_format: str = "edits"):
        """`script`, or `skill` and `seed`, are passed on to `mock/patcher` (other models ignore
        them). A proposal is greedy (`temperature`) unless the request asks for a sample
        (`ProposalRequest.sample`): then it is drawn at `sample_temperature` with a seed of its
        own, from `seed`, the request text and its ordinal, so a rerun of the same request draws
        the same answer."""
        self.model = model
        self.patch_format = patch_format
        self.script = script
        self.skill = skill
        self.seed = seed
        self.temperature = temperature
        self.sample_temperature = sample_temperature
        self.retry_attempts = retry_attempts

    def _sampling(self, request: ProposalRequest) -> dict:
        if not request.sample:
            return {"temperature": self.temperature}
        digest = hashlib.sha256(f"{self.seed}:{request.ordinal}:{request.request}".encode()).digest()
        return {"temperature": self.sample_temperature, "seed": int.from_bytes(digest[:4], "little") >> 1}

    def _lm(self, request: ProposalRequest, max_tokens: int):
        metadata = {PROPOSAL_KEY: request.ordinal}
        if self.script:
            metadata[SCRIPT_KEY] = self.script
        if self.skill is not None:
            metadata.update({SKILL_KEY: self.skill, SEED_KEY: self.seed})
        return dspy_lm(self.model, metadata=metadata, max_tokens=max_tokens, retry_attempts=self.retry_attempts,
                       **self._sampling(request))

    def propose(self, request: ProposalRequest) -> Proposal:
        """One proposal; a contrast request that ends with a rule to complete (its guided form,
        `optimizer.proposal.contrast`) is answered with the kind of input only."""
        import dspy

        from optimizer.proposal.signature import signature

        guided = rule_to_complete(request.request) if self.patch_format == "contrast" else None
        form = "kind" if guided else self.patch_format
        max_tokens = MAX_ANSWER_TOKENS[form]
        lm = self._lm(request, max_tokens)
        predictor = dspy.Predict(signature(form))
        target = request.workdir / request.prompt_file
        base = target.read_text(encoding="utf-8")
        proposal = Proposal()
        feedback = ""
        for attempt in range(ATTEMPTS):
            with charged("patcher", self.model, estimate_tokens(request.request, feedback), max_tokens) as charge:
                try:
                    with dspy.context(lm=lm):
                        answer = predictor(request=request.request, feedback=feedback)
                except Exception as exc:  # a reply dspy cannot parse, or a model fault after retries
                    detail = first_line(str(exc))[:300]  # never the traceback litellm quotes below it
                    proposal.error = f"the patcher gave no usable answer: {type(exc).__name__}: {detail}"
                    break
                finally:
                    charge.usage = lm_usage(lm)
                    proposal.usage.add(charge.usage)
            proposal.rationale = str((answer.kind if form == "kind" else answer.rationale) or "").strip()
            edits, refused = _edits(answer, form, guided)
            if not edits:
                proposal.error = "the patcher proposed no edit"
                proposal.log += attempt_log(attempt, proposal.rationale, edits, proposal.error)
                break
            try:
                patched = apply_edits(base, edits)
            except EditError as exc:
                feedback = FEEDBACK.read_text(encoding="utf-8").format(error=exc)
                proposal.error = str(exc)
                proposal.log += attempt_log(attempt, proposal.rationale, edits, proposal.error)
                continue
            problem = "; ".join(filter(None, (refused, _problem(patched, edits, form, request.check)))) or None
            if problem and attempt + 1 < ATTEMPTS:  # the last answer is kept for the loop to judge
                feedback = CHECK_FEEDBACK.read_text(encoding="utf-8").format(
                    error=problem, answer="\n".join(edit.replace.strip("\n") for edit in edits))
                proposal.log += attempt_log(attempt, proposal.rationale, edits, f"sent back: {problem}")
                continue
            if refused:  # sent back once already: a rule whose kind says nothing of the input has no scope
                proposal.error = f"the kind of input was sent back and still: {refused}"
                proposal.log += attempt_log(attempt, proposal.rationale, edits, proposal.error)
                break
            proposal.error = None
            proposal.log += attempt_log(attempt, proposal.rationale, edits, "applied")
            target.write_text(patched, encoding="utf-8")
            break
        return proposal


def _edits(answer, patch_format: str, guided: str | None = None) -> tuple[list[Edit], str | None]:
    """The answer's edits, and why a guided answer's kind of input is to be sent back (or None)."""
    if patch_format == "kind":
        given = str(answer.kind or "")
        kind = kind_of(given, guided)
        return ([Edit("", "\n" + complete(guided, kind))] if kind else []), kind_problem(given, kind, guided)
    if patch_format in RULE_FORMATS:
        rule = str(answer.rule or "").strip()
        return ([Edit("", "\n" + rule)] if rule else []), None  # appended as a paragraph of its own
    return [Edit(edit.search, edit.replace) for edit in answer.edits or []], None


def _problem(patched: str, edits: list[Edit], patch_format: str,
             check: Callable[[str], str | None] | None) -> str | None:
    """Why an answer that applies would still not be used (every reason at once), or None."""
    problems = []
    if patch_format in RULE_FORMATS:
        rule = edits[0].replace.strip()
        lines = len([line for line in rule.splitlines() if line.strip()])
        sentences = len(SENTENCE_END.findall(rule))
        if lines > 1 or sentences > MAX_RULE_SENTENCES:
            problems.append(RULE_TOO_LONG.read_text(encoding="utf-8").strip().format(lines=lines, sentences=sentences))
    found = check(patched) if check else None
    if found:
        problems.append(found)
    return "; ".join(problems) or None


def attempt_log(attempt: int, rationale: str, edits: list[Edit], outcome: str) -> str:
    """One answer of the patcher as the reviewer reads it in `proposal-N.log`: what it said, the
    edits exactly as given (an edit that did not apply is otherwise lost), and what became of them."""
    lines = [f"## Attempt {attempt + 1}: {outcome}", "", "Rationale:", rationale or "(none)", ""]
    for number, edit in enumerate(edits, 1):
        lines += [f"Edit {number} search:", _fenced(edit.search) if edit.search else "(empty: append)",
                  f"Edit {number} replace:", _fenced(edit.replace), ""]
    return "\n".join(lines) + "\n"


def _fenced(text: str) -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}\n{text.rstrip(chr(10))}\n{fence}"


mock.play("weak_patcher", weak_answer)
