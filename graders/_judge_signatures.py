"""dspy signatures of the PKM judges. Imported lazily (dspy takes seconds to import).

This module keeps real (not postponed) annotations: dspy reads the field types at class creation.
The instructions come from the rubric files.
"""

from typing import Optional

import dspy


class InsightQuality(dspy.Signature):
    note: str = dspy.InputField(desc="the note the user wrote")
    knowledge: str = dspy.InputField(desc="the knowledge-base files the assistant read or changed")
    insight: str = dspy.InputField(desc="the insight to grade")
    rationale: str = dspy.OutputField()
    groundedness: Optional[float] = dspy.OutputField(desc="0 to 1, or null")
    non_redundancy: Optional[float] = dspy.OutputField(desc="0 to 1, or null")
    expression: Optional[float] = dspy.OutputField(desc="0 to 1, or null")


class AppendCoherence(dspy.Signature):
    path: str = dspy.InputField(desc="the file that was edited")
    before: str = dspy.InputField(desc="the file before the edit")
    after: str = dspy.InputField(desc="the file after the edit")
    rationale: str = dspy.OutputField()
    coherence: float = dspy.OutputField(desc="1, 0.5 or 0")


def insight_quality(instructions: str) -> type[dspy.Signature]:
    return InsightQuality.with_instructions(instructions)


def append_coherence(instructions: str) -> type[dspy.Signature]:
    return AppendCoherence.with_instructions(instructions)
