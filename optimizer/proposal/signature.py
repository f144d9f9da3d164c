"""The dspy signature of the `llm` proposer. Imported lazily (dspy takes seconds to import).

This module keeps real (not postponed) annotations: dspy reads the field types at class creation.
"""

from pathlib import Path

import dspy
from pydantic import BaseModel

from optimizer.proposal.manual import shipped_manual

TEMPLATES = Path(__file__).parent.parent / "templates"
CONTRAST = shipped_manual() / "patcher_contrast"
INSTRUCTIONS = {"edits": TEMPLATES / "patcher_instructions.md", "rule": TEMPLATES / "patcher_rule_instructions.md",
                "contrast": CONTRAST / "instructions.md", "kind": CONTRAST / "kind_instructions.md"}


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


class ProposeKind(dspy.Signature):
    request: str = dspy.InputField()
    feedback: str = dspy.InputField()
    kind: str = dspy.OutputField()


def signature(patch_format: str = "edits") -> type[dspy.Signature]:
    """`edits`: exact search/replace edits. `rule`: one new instruction, appended to the prompt (a
    form a small model can produce; asked for edits, a 1.5B model repeats itself until cut off).
    `contrast`: one rule too, in a fixed form, answering the contrast request (`optimizer.proposal.contrast`).
    `kind`: only the kind of input that completes the rule a guided contrast request ends with
    (the rule's direction comes from the graders' data, not from the model)."""
    base = {"rule": ProposeRule, "contrast": ProposeRule, "kind": ProposeKind}.get(patch_format, ProposePatch)
    return base.with_instructions(INSTRUCTIONS[patch_format].read_text(encoding="utf-8"))
