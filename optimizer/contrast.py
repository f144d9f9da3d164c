"""The contrast request: a patch request a small patcher model can follow.

Today's request (`request.md.j2`) gives a patcher everything: whole traces, workspaces, every
grader's verdict, the manual. A 1.5B model answers it with rules about the wrong bucket. This
one cuts the target's failures into short contrastive cases (the input, what the agent did, what
was expected, the grader's words), shows the confusions the graders name
(`optimizer.targets`) and asks for one rule in a fixed form ("When <kind of input>, <what to
do> instead of <the mistake>"). Its text is `prompt_manual/patcher_contrast/`; the answer is a
`rule` answer (`patch_format = "contrast"`), so it is checked, linted and gated as any rule.
Many samples of it are screened by the search like any candidates.

From gepa's reflective mutation it takes the per-example triple (inputs, generated outputs,
feedback) as the unit a patcher reads; from DSPy's instruction proposers, one instruction per
sample, drawn at a sampling temperature so the samples differ. Not taken: GroundedProposer's
dataset and program summaries (extra model calls a small model answers poorly).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

FOLDER = Path(__file__).resolve().parent.parent / "prompt_manual" / "patcher_contrast"
MAX_PIECES = 6
"""Cases shown; a small model's attention is the limit, not its context."""
INPUT_CHARS = 240
WORDS_CHARS = 200


def _cut(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def piece(record: dict[str, Any]) -> dict[str, str] | None:
    """One failure record (`optimizer.request.failure_records`) as a contrastive case: its first
    failed grader that names a confusion, else its first failed grader, else how it ended."""
    failed = [g for g in record["graders"] if not g.get("passed") and not g.get("errored")]
    named = [g for g in failed if isinstance((g.get("details") or {}).get("confusion"), dict)]
    chosen = (named or failed or [None])[0]
    if chosen is None:
        if not record.get("ending"):
            return None
        did, expected, words = record["ending"], "a finished answer", record["ending"]
    else:
        confusion = (chosen.get("details") or {}).get("confusion") or {}
        words = f"{chosen.get('grader', '')}: {chosen.get('rationale', '')}"
        did = str(confusion.get("got", "see the grader"))
        expected = str(confusion.get("expected", f"what {chosen.get('grader', 'the grader')} checks"))
    return {"input": _cut(record["input"], INPUT_CHARS), "did": _cut(did, WORDS_CHARS),
            "expected": _cut(expected, WORDS_CHARS), "words": _cut(words, WORDS_CHARS)}


def pieces(failures: list[dict[str, Any]], limit: int = MAX_PIECES) -> list[dict[str, str]]:
    """The first `limit` cases of the failures, in their order (most informative first), named
    confusions first."""
    cases = [case for case in (piece(record) for record in failures) if case]
    named = [case for case in cases if not case["did"].startswith("see the grader")]
    return (named + [case for case in cases if case not in named])[:limit]


def instructions() -> str:
    return (FOLDER / "instructions.md").read_text(encoding="utf-8")


def render_contrast(*, selection, failures: list[dict[str, Any]], prompt: str,
                    rejected_ideas: list[str] | None = None) -> str:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(FOLDER), autoescape=False,
                                     keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return environment.get_template("request.md.j2").render(
        agent=selection.agent, targets=selection.targets, pieces=pieces(failures),
        rejected_ideas=rejected_ideas or [], prompt=prompt.rstrip("\n"))
