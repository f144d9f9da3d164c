"""The dspy signature of the `llm` proposer. Imported lazily (dspy takes seconds to import).

This module keeps real (not postponed) annotations: dspy reads the field types at class creation.
"""

from pathlib import Path

import dspy
from pydantic import BaseModel

INSTRUCTIONS = Path(__file__).parent / "templates" / "patcher_instructions.md"


class PromptEdit(BaseModel):
    search: str
    replace: str


class ProposePatch(dspy.Signature):
    request: str = dspy.InputField()
    feedback: str = dspy.InputField()
    rationale: str = dspy.OutputField()
    edits: list[PromptEdit] = dspy.OutputField()


def signature() -> type[dspy.Signature]:
    return ProposePatch.with_instructions(INSTRUCTIONS.read_text(encoding="utf-8"))
