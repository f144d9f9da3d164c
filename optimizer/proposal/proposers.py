"""Proposers: where a prompt patch comes from. One interface, three kinds.

* `llm` (default): a dspy module on the patcher model returns a rationale and exact
  search/replace edits; edits that do not apply, or a patch the loop's pre-rollout checks would
  reject (`ProposalRequest.check`), are sent back once with the reason. With
  `patch_format = "rule"` it returns one new rule instead,
  appended to the prompt; with `patch_format = "contrast"`, a request that ends with a rule to
  complete (its guided form, `optimizer.proposal.contrast`) is answered with the kind of input only.
  With `patch_format = "example"` (the default for the embedded models) a patch made without
  the patcher is proposed instead when the targets have one: an answer the prompt shows taken
  out (`optimizer.proposal.anchors`), or a worked example of a targeted bucket from its reference
  solution (`optimizer.proposal.examples`); the patcher is asked only for a target with neither.
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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from optimizer.models import is_embedded
from optimizer.proposal.box import Box
from optimizer.proposal.anchors import Anchor
from optimizer.proposal.examples import Example
from optimizer.settings.parts import ProposalSettings
from optimizer.types import Usage

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
    prepared: list[Example | Anchor] = field(default_factory=list)
    """For the `example` patch format, the patches made without the patcher that this request's
    targets may get, this proposal's first (`Candidates.prepared`): answers the prompt shows
    (`anchors.find`), then worked examples (`examples.choose`)."""


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


def patch_format(settings: ProposalSettings) -> str:
    """What the proposer is asked for: the `patch_format` setting, with `auto` resolved by the
    proposer (`example` for the `llm` proposer on an embedded patcher model, else `edits`: a
    coding agent run as `command` edits the file the full request names, whatever
    `patcher_model` says)."""
    if settings.patch_format != "auto":
        return settings.patch_format
    return "example" if _small_patcher(settings) else "edits"


def asked_format(settings: ProposalSettings) -> str:
    """What the patcher is asked for: `patch_format`, where `example` asks (for a target with no
    example to show) for a `contrast` rule from a small patcher and `edits` from any other, and
    `decision` is a contrast request whose cases come from every bucket that made the target's
    choice wrong the same way (`request_failures`)."""
    chosen = patch_format(settings)
    if chosen == "decision":
        return "contrast"
    if chosen == "example":
        return "contrast" if _small_patcher(settings) else "edits"
    return chosen


def _small_patcher(settings: ProposalSettings) -> bool:
    return settings.proposer == "llm" and is_embedded(settings.patcher_model)


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
    """Makes the request's first prepared patch (`ProposalRequest.prepared`: an answer the prompt
    shows taken out, or a worked example added at its end); a request with none goes to
    `fallback` (the patcher, in what `auto` would ask)."""

    name = "example"
    note = ""
    confined = True

    def __init__(self, fallback: Proposer):
        self.fallback = fallback

    def propose(self, request: ProposalRequest) -> Proposal:
        if not request.prepared:
            return self.fallback.propose(request)
        patch = request.prepared[0]
        target = request.workdir / request.prompt_file
        target.write_text(patch.apply(target.read_text(encoding="utf-8")), encoding="utf-8")
        return Proposal(rationale=patch.rationale())
