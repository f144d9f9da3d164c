"""The dspy signature of the `llm` proposer. Imported lazily (dspy takes seconds to import).

This module keeps real (not postponed) annotations: dspy reads the field types at class creation.
"""

from pathlib import Path

import dspy
from pydantic import BaseModel

TEMPLATES = Path(__file__).parent / "templates"
INSTRUCTIONS = {"edits": TEMPLATES / "patcher_instructions.md", "rule": TEMPLATES / "patcher_rule_instructions.md",
                "contrast": Path(__file__).resolve().parent.parent / "prompt_manual" / "patcher_contrast" /
                "instructions.md"}


class PromptEdit(BaseModel):
    search: str
    replace: str


class ProposePatch(dspy.Signature):
    request: str = dspy.InputField()
    feedback: str = dspy.InputField()
    rationale: str = dspy.OutputField()
    edits: list[PromptEdit] = dspy.OutputField()


class ProposeRule(dspy.Signature):
    request: str = dspy.InputField()
    feedback: str = dspy.InputField()
    rationale: str = dspy.OutputField()
    rule: str = dspy.OutputField()


def signature(patch_format: str = "edits") -> type[dspy.Signature]:
    """`edits`: exact search/replace edits. `rule`: one new instruction, appended to the prompt (a
    form a small model can produce; asked for edits, a 1.5B model repeats itself until cut off).
    `contrast`: one rule too, in a fixed form, answering the contrast request (`optimizer.contrast`)."""
    base = ProposeRule if patch_format in ("rule", "contrast") else ProposePatch
    return base.with_instructions(INSTRUCTIONS[patch_format].read_text(encoding="utf-8"))
