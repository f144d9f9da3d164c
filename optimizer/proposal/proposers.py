"""Proposers: where a prompt patch comes from. One interface, three kinds.

* `llm` (default): a dspy module on the patcher model returns a rationale and exact
  search/replace edits; edits that do not apply, or a patch the loop's pre-rollout checks would
  reject (`ProposalRequest.check`), are sent back once with the reason. With
  `patch_format = "rule"` (the default for the embedded models) it returns one new rule instead,
  appended to the prompt; with `patch_format = "contrast"`, a request that ends with a rule to
  complete (its guided form, `optimizer.proposal.contrast`) is answered with the kind of input only.
  With `patch_format = "example"` a worked example of a targeted bucket is added instead, from
  its reference solution (`optimizer.proposal.examples`), when the bucket has one to show; the patcher is
  asked only for a target with none.
* `command`: a coding-agent CLI the user already has, configured as a command line with
  `{request}` and `{workdir}`; it runs in the proposal's box (`optimizer.proposal.box`: a clone of its
  own, under bubblewrap when it works here), in a process group of its own, with a timeout. A
  command that fails or times out gives no patch, whatever it edited.
* `mock/patcher` is not a proposer but a model: the `llm` proposer on `--patcher-model
  mock/patcher` answers from a JSON script (`mock_patcher_script`), or as a weak patcher of the
  `mock/sim` agents (`mock_patcher_skill`), so tests and demos go through the same dspy and
  litellm path as a real model.

A proposer writes its change into the box's clone and returns what it did; the loop takes the
clone's final content against the base commit as the patch (committed by the proposer or not),
then checks, commits and evaluates it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

from optimizer.proposal.box import (BOX_MARK, Box, Confinement, confined, confinement, proposer_environment, record_owner,
                           under_private_tmp)
from optimizer.proposal.contrast import complete, kind_of, kind_problem, rule_to_complete
from optimizer.errors import ConfigError, first_line
from optimizer.proposal.examples import Example
from optimizer.ledger import charged, estimate_tokens
from optimizer.models import is_embedded, mock
from optimizer.models._context import PROPOSAL_KEY, SCRIPT_KEY, SEED_KEY, SKILL_KEY
from optimizer.models._dspy import dspy_lm, lm_usage
from optimizer.proposal.patch import Edit, EditError, apply_edits
from optimizer.nightly.reaper import Reaper
from optimizer.settings.parts import ProposalSettings
from optimizer.types import Usage
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
STOP_GRACE_S = 2.0
"""How long a proposer command has to exit after SIGTERM (on a timeout or Ctrl-C) before its
process group is killed."""
LOG_CHARS = 20000
"""The end of a proposer command's output kept as its log."""
LOG_TAIL_LINES = 12
"""The lines of a failed proposer command's log shown on the console."""


@dataclass
class ProposalRequest:
    request: str
    request_path: Path
    prompt_file: str
    """Relative to the root of `workdir`."""
    workdir: Path
    """The box's clone, where the proposer edits."""
    ordinal: int
    check: Callable[[str], str | None] | None = None
    """The loop's pre-rollout checks on a patched prompt (None when it passes, else why not); a
    proposer that can try again feeds the reason back before giving its last answer."""
    box: Box | None = None
    """The box `workdir` is in: its folder is all a confined proposer command may write to, and
    its scratch HOME the command's. None runs a command with the caller's HOME."""
    sample: bool = False
    """One of several proposals the iteration asks for (a search's candidates, `candidates` > 1):
    a proposer that can sample draws it at its sampling temperature, so they differ."""
    examples: list[Example] = field(default_factory=list)
    """The worked examples this request's targets may show (`examples.choose`), for the
    `example` patch format; the n-th proposal adds the n-th."""


@dataclass
class Proposal:
    rationale: str = ""
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    """Set when the proposer produced no usable patch (the reason, for the record)."""
    log: str = ""


class Proposer(Protocol):
    name: str
    note: str
    """Said once per run before the first proposal (how the proposer is confined), or empty."""
    confined: bool
    """True when it cannot write outside its box: an in-process proposer that writes only the
    prompt file, or a command under bubblewrap."""

    def propose(self, request: ProposalRequest) -> Proposal: ...


class LLMProposer:
    name = "llm"
    note = ""
    confined = True

    def __init__(self, model: str, *, script: str | None = None, skill: float | None = None, seed: int = 0,
                 temperature: float = 0.0, sample_temperature: float = 0.0, retry_attempts: int = 4,
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


def patch_format(settings: ProposalSettings) -> str:
    """What the proposer is asked for: the `patch_format` setting, with `auto` resolved by the
    proposer (`contrast` for the `llm` proposer on an embedded patcher model, else `edits`: a
    coding agent run as `command` edits the file the full request names, whatever
    `patcher_model` says)."""
    if settings.patch_format != "auto":
        return settings.patch_format
    return "contrast" if settings.proposer == "llm" and is_embedded(settings.patcher_model) else "edits"


def asked_format(settings: ProposalSettings) -> str:
    """What the patcher is asked for: `patch_format`, where `example` asks (for a target with no
    example to show) what `auto` would."""
    chosen = patch_format(settings)
    return patch_format(replace(settings, patch_format="auto")) if chosen == "example" else chosen


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


class CommandProposer:
    name = "command"

    def __init__(self, template: str, *, timeout_s: float, confinement: Confinement = Confinement(None),
                 env: tuple[str, ...] | list[str] = ()):
        if "{request}" not in template:
            raise ConfigError("the proposer command must contain {request}", field="proposer_command",
                              fix="e.g. proposer_command = \"my-agent --prompt-file {request} --cwd {workdir}\"")
        self.template = template
        self.timeout_s = timeout_s
        self.bwrap = confinement.bwrap
        self.note = confinement.note
        self.confined = confinement.bwrap is not None
        self.env = tuple(env)
        """Names the command's environment keeps beside `box.PASSED` (`proposer_env`)."""

    def propose(self, request: ProposalRequest) -> Proposal:
        command = self.template.replace("{request}", shlex.quote(str(request.request_path))) \
                               .replace("{workdir}", shlex.quote(str(request.workdir)))
        proposal = Proposal()
        argv = ["bash", "-c", command]
        if self.bwrap:
            writable = request.box.folder if request.box else request.workdir
            argv = confined([self.bwrap], argv, writable=[writable.resolve()],
                            readable=[*under_private_tmp(self.template), request.request_path.resolve()],
                            workdir=request.workdir.resolve())
        env = proposer_environment(request.box.home if request.box else None, self.env)
        if request.box:
            env[BOX_MARK] = str(request.box.folder.resolve())
        with Reaper() as reaper, tempfile.TemporaryFile() as output:
            process = subprocess.Popen(argv, cwd=request.workdir, stdin=subprocess.DEVNULL, env=env,
                                       stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
            if request.box:
                record_owner(request.box, process.pid)
            try:
                code = process.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                code = None
            finally:  # also on Ctrl-C, SIGTERM, SIGHUP: the command's own session does not get those signals
                _stop_group(process)
                strays = reaper.stop_strays(group=process.pid)
            proposal.log = _tail(output)
        if code is None:
            proposal.error = f"the proposer command timed out after {self.timeout_s:g} s; its changes are not used"
        elif code < 0:
            proposal.error = f"the proposer command was killed by signal {-code}; its changes are not used"
        elif code != 0:
            proposal.error = f"the proposer command failed with exit code {code}; its changes are not used"
        proposal.rationale = _last_paragraph(proposal.log)
        proposal.log += _strays_note(strays)
        return proposal


def _stop_group(process: subprocess.Popen) -> None:
    """End the command and everything it started (its process group): after a timeout or Ctrl-C,
    and after a normal exit too, so nothing it left running changes the clone while the loop
    reads it. SIGTERM to the group, up to `STOP_GRACE_S` for the command itself to exit, then
    SIGKILL to whatever is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:  # the command exited and left nothing running
        process.wait()
        return
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _strays_note(strays: list[int]) -> str:
    if not strays:
        return ""
    return (f"\n[optimizer] the proposer command left {len(strays)} process(es) running outside its process "
            f"group (pids {', '.join(map(str, strays))}); they were killed before its clone was read\n")


def _tail(output) -> str:
    size = os.fstat(output.fileno()).st_size
    output.seek(max(0, size - 4 * LOG_CHARS))
    return output.read().decode("utf-8", errors="replace")[-LOG_CHARS:]


def _last_paragraph(text: str) -> str:
    paragraphs = [part.strip() for part in text.strip().split("\n\n") if part.strip()]
    return paragraphs[-1][:2000] if paragraphs else ""


class FixedProposer:
    """A proposal already made (a candidate of the search, `optimizer.proposal.search`): it writes that
    prompt text into the box, so the candidate goes through the loop's checks, commit and gate
    exactly as a fresh proposal would. Named after the proposer that made it."""

    note = ""
    confined = True

    def __init__(self, source: Proposer, text: str, rationale: str):
        self.name, self.text, self.rationale = source.name, text, rationale

    def propose(self, request: ProposalRequest) -> Proposal:
        (request.workdir / request.prompt_file).write_text(self.text, encoding="utf-8")
        return Proposal(rationale=self.rationale)


class ExampleProposer:
    """Adds the request's next worked example (`ProposalRequest.examples`) at the end of the
    prompt; a request with none goes to `fallback` (the patcher, in what `auto` would ask)."""

    name = "example"
    note = ""
    confined = True

    def __init__(self, fallback: Proposer):
        self.fallback = fallback

    def propose(self, request: ProposalRequest) -> Proposal:
        if not request.examples:
            return self.fallback.propose(request)
        example = request.examples[(request.ordinal - 1) % len(request.examples)]
        target = request.workdir / request.prompt_file
        text = target.read_text(encoding="utf-8")
        target.write_text(text.rstrip("\n") + "\n\n" + example.text + "\n", encoding="utf-8")
        return Proposal(rationale=f"worked example: the note of {example.suite}/{example.task_id} and its "
                                  f"reference calls (that task leaves the gate's pairs)")


def make_proposer(settings: ProposalSettings) -> Proposer:
    """The proposer `settings` name (`Settings.proposal`)."""
    if settings.proposer == "command":
        if not settings.proposer_command:
            raise ConfigError("--proposer command needs a command line", field="proposer_command",
                              fix="set proposer_command in [tool.optimizer] or OPTIMIZER_PROPOSER_COMMAND")
        return CommandProposer(settings.proposer_command, timeout_s=settings.proposer_timeout,
                               confinement=confinement(), env=settings.proposer_env)
    patcher = LLMProposer(settings.patcher_model, script=settings.sim.mock_patcher_script,
                          skill=settings.sim.mock_patcher_skill, seed=settings.seed,
                          sample_temperature=settings.patcher_temperature,
                          retry_attempts=settings.retry_attempts, patch_format=asked_format(settings))
    return ExampleProposer(patcher) if patch_format(settings) == "example" else patcher


mock.play("weak_patcher", weak_answer)
