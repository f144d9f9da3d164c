"""The PKM Agent's outcome: the knowledge base after the trial, against before, as the PKM graders
read it. Paths are relative to `PKM/`.

With it, the few facts of the knowledge base's format that both the agent and its graders use:
the fact_id marker, the PARA roots, and how a path splits into segments.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import NotRequired, TypedDict

from optimizer import OutcomeModel

MARKER = re.compile(r"<!--\s*fact_id:\s*([^\s>]+?)\s*-->")
"""The marker an entry filed for a note carries: `<!-- fact_id: 2026/05/25.md#ts_1 -->`."""
PARA_ROOTS = ("Projects", "Areas", "Resources", "Archives")


def segments(path: str) -> list[str]:
    """A path's parts, without empty ones: `/Areas//Health/` and `Areas/Health` are the same."""
    return [part for part in re.split(r"/+", path.strip().strip("/")) if part]


@with_config(ConfigDict(extra="forbid"))
class Event(TypedDict):
    """A successful read or change, in the order made (a dict: only the keys of its kind are there)."""

    op: str
    """`read`, `write`, `edit`, `move` or `remove`."""
    path: str
    origin: str
    """The file's path in the fixture, followed through moves."""
    existed: NotRequired[bool]
    """`write`: the file was there before."""
    replacements: NotRequired[int]
    """`edit`: how many occurrences were replaced."""
    src: NotRequired[str]
    """`move`: the path moved from."""


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TreeEntry(_Part):
    path: str
    lines: int


class FileSides(_Part):
    """A file's text before and after the trial (None: absent on that side; capped)."""

    before: str | None = None
    after: str | None = None


class Insight(_Part):
    """The insight saved on the timeline card."""

    fact_id: str
    text: str
    related_fact_ids: list[str] = Field(default_factory=list)


class PKMOutcome(OutcomeModel):
    """The knowledge base after the trial (the graders read this, never the chat)."""

    fact_id: str | None = None
    """The note's Raw Input ID."""
    marker: str | None = None
    """The marker an entry filed for the note must carry."""
    tree: list[TreeEntry] = Field(default_factory=list)
    """Final files under PKM/, sorted, with line counts."""
    created: list[str] = Field(default_factory=list)
    """Compared with the fixture; a moved file counts as deleted at its old path and created at its new one."""
    modified: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    moves: list[list[str]] = Field(default_factory=list)
    """`[src, dst]` pairs in order."""
    events: list[Event] = Field(default_factory=list)
    files: dict[str, FileSides] = Field(default_factory=dict)
    """Every file read, created, modified or deleted."""
    markers_before: list[str] = Field(default_factory=list)
    """The fact_id markers in the fixture."""
    markers_after: dict[str, list[str]] = Field(default_factory=dict)
    """`{marker: [paths]}` at the end."""
    filed_in: list[str] = Field(default_factory=list)
    """Created or modified files that carry the note's marker."""
    diff: str = ""
    """Unified diff of PKM/ against the fixture."""
    insight: Insight | None = None
    skipped: bool = False
    """The agent took the skip path."""
    skip_evidence: str | None = None
    mutated: bool = False
    """Some change to the knowledge base succeeded."""
    reminders: list[str] = Field(default_factory=list)
    """The system notes the agent was shown."""

    def skip_path(self) -> bool:
        """The trial skipped and changed nothing (the graders that judge filing do not apply)."""
        return self.skipped and not self.mutated
