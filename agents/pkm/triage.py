"""The PKM Agent's first decision, made on the note alone: keep it or skip it.

The first turn offers only `keep_note` and `skip_pkm_organization`, and the user message holds the
note and that question (`pkm_agent.user.md`). Only a kept note is followed by the knowledge base
and the files closest to it (`keep_note`'s answer), and from then on the agent files: skipping is
no longer offered. Asked both at once, the embedded 1.5B model did what the last instruction of
the message said, whatever its condition: told last to file in the closest file, it filed every
declined note there; told last to skip trivial notes, it skipped every note
(docs/benchmarks.md, "The closest file as the default (tried)"). Apart, each question is the last
one when it is asked.

A skip at the first turn is asked about once more, in a fresh conversation whose message also
names the files closest to the note (`pkm_agent.again.md`), and the note is skipped only when that
reading skips it too. The 1.5B model's answer to the question changed with its wording more than
with the note: each wording skipped a different few notes to keep, while every wording skipped the
notes to skip. Two readings in different words, skipping only on both, is the prompt ensemble of
Arora et al. ("Ask Me Anything", ICLR 2023), aggregated for the costlier error: a lost note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from . import filing
from .tools import SCHEMAS
from optimizer import Tool, ToolOutput
from optimizer.types import Task, ToolCallSpec

KEEP = "keep_note"
SKIP = "skip_pkm_organization"
INSIGHT = "update_timeline_card_insight"
DECIDING = [KEEP, SKIP]
TOPIC_WORDS = 8
"""Words of the note a scripted `keep_note` gives as its topic."""


@dataclass
class Triage:
    answer: Callable[[], str]
    """What `keep_note` answers, built when the note is kept: the knowledge base, the files closest
    to the note, where to file it."""
    read_again: Callable[[], bool]
    """Whether the note, asked about again in other words, is kept (see the module docstring)."""
    kept_again: str
    """Said before `answer` when that second reading keeps a note the agent skipped."""
    kept: bool = False
    asked_again: bool = False
    overruled: bool = False

    def keep(self, args: dict[str, Any]) -> ToolOutput:
        self.kept = True
        return ToolOutput(self.answer())

    def tool(self) -> Tool:
        return Tool(SCHEMAS[KEEP], self.keep)

    def checked(self, skip: Tool) -> Tool:
        """`skip` that, the first time it is called before the note is kept, reads the note again
        and keeps it instead when that reading does (the call then does not finish the run)."""
        def handler(args: dict[str, Any]) -> ToolOutput:
            self.overruled = False
            evidence = args.get("evidence")
            if not self.kept and not self.asked_again and isinstance(evidence, str) and evidence.strip():
                self.asked_again = True
                if self.read_again():
                    self.overruled = self.kept = True
                    return ToolOutput(self.kept_again + "\n" + self.answer())
            return skip.handler(args)
        return Tool(skip.schema, handler, terminal=lambda: not self.overruled, narrow=skip.narrow)

    def listed(self, tools: list[Tool]) -> list[Tool]:
        """`tools` with `keep_note` added just before `skip_pkm_organization`, as the schemas list
        them (the order the model reads the two choices in), and the skip `checked`."""
        at = next((i for i, tool in enumerate(tools) if tool.name == SKIP), len(tools))
        return [*tools[:at], self.tool(), *(self.checked(tool) if tool.name == SKIP else tool for tool in tools[at:])]

    def deciding(self, mutated: bool) -> bool:
        """Whether the note is still to be kept or skipped: it is not kept and nothing was written
        (a model that files at once has kept it)."""
        return not self.kept and not mutated

    def offered(self, mutated: bool) -> list[str]:
        """Keep or skip while `deciding`; then the filing tools, the insight only once something
        was written (saved before anything was written, it led the embedded model to skip the note
        it was then told was not filed; `file_note` takes the insight itself)."""
        if self.deciding(mutated):
            return list(DECIDING)
        filing = [name for name in SCHEMAS if name not in DECIDING]
        return filing if mutated else [name for name in filing if name != INSIGHT]

    def finishing(self, filed: bool) -> list[str]:
        """What finishes the job from here: the insight once the note is filed; filing it in one
        call once it is kept; before that, filing or skipping. (Offered Write and Edit here, the
        embedded model rewrote whole files with one line each.)"""
        if filed:
            return [INSIGHT]
        return ["file_note"] if self.kept else ["file_note", SKIP]


def deciding_choice() -> dict[str, Any]:
    """A tool choice that allows only keeping or skipping (an OpenAI `allowed_tools` choice)."""
    return {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": name}} for name in DECIDING]}}


def opened(task: Task, calls: list[ToolCallSpec]) -> list[ToolCallSpec]:
    """`calls` in the order the agent asks for them: `keep_note` first (its topic the note's first
    words), unless they decide on the note themselves or there are none."""
    if not calls or calls[0].name in DECIDING:
        return list(calls)
    topic = " ".join(task.input.content.split()[:TOPIC_WORDS])
    return [ToolCallSpec(name=KEEP, arguments={"topic": topic}), *calls]


def demonstration(task: Task) -> list[ToolCallSpec]:
    """The calls a worked example of `task` shows: `agents.pkm.filing.demonstration`, opened as
    the agent asks (`opened`)."""
    return opened(task, filing.demonstration(task))
