"""The PKM Agent's first decision, made on the note alone: keep it or skip it.

The first turn offers only `keep_note` and `skip_pkm_organization`, and the user message holds the
note and that question (`pkm_agent.user.md`). Only a kept note is followed by the knowledge base
and the files closest to it (`keep_note`'s answer), and from then on the agent files: skipping is
no longer offered. Asked both at once, the embedded 1.5B model did what the last instruction of
the message said, whatever its condition: told last to file in the closest file, it filed every
declined note there; told last to skip trivial notes, it skipped every note
(docs/benchmarks.md, "The closest file as the default (tried)"). Apart, each question is the last
one when it is asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    shown: str
    """What `keep_note` answers: the knowledge base, the files closest to the note, where to file."""
    kept: bool = False

    def keep(self, args: dict[str, Any]) -> ToolOutput:
        self.kept = True
        return ToolOutput(self.shown)

    def tool(self) -> Tool:
        return Tool(SCHEMAS[KEEP], self.keep)

    def listed(self, tools: list[Tool]) -> list[Tool]:
        """`tools` with `keep_note` added just before `skip_pkm_organization`, as the schemas list
        them (the order the model reads the two choices in)."""
        at = next((i for i, tool in enumerate(tools) if tool.name == SKIP), len(tools))
        return [*tools[:at], self.tool(), *tools[at:]]

    def offered(self, mutated: bool) -> list[str]:
        """Keep or skip until the note is kept (or something was written: a model that files at
        once has kept it); then the filing tools, the insight only once something was written (saved
        before anything was written, it led the embedded model to skip the note it was then told
        was not filed; `file_note` takes the insight itself)."""
        if not self.kept and not mutated:
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
