"""The PKM Agent's two LLM judges: insight quality and append coherence.

Both run on the judge model through `optimizer.ask` (dspy, temperature 0, typed outputs,
rubric in `graders/rubrics/`, answers cached by content hash, model id and rubric hash recorded
in every result). A judge that cannot answer validly makes the grader *errored*, not failed.

Offline answer (what `mock/sim` and `mock/oracle` reply as judges; a documented heuristic for
tests, not a judgment). Words are lowercase runs of letters or digits of at least 4 characters,
minus stopwords; in Chinese and Japanese text every pair of adjacent characters is a word.

* insight quality: groundedness = share of the insight's words found in the note or the files
  (>= 0.5 -> 1, >= 0.25 -> 0.5, else 0); non_redundancy = share not found in the note
  (>= 0.2 -> 1, >= 0.05 -> 0.5, else 0); expression = 1 for 1-3 sentences of 6-90 words, 0.5
  for up to 5 sentences of 3-150 words, else 0.
* append coherence: 0 when under 90% of the old non-empty lines survive; otherwise 1 when an
  added line follows the file's dominant entry style (bullets, `##` sections, table rows or
  paragraphs), 0.5 when none does.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import Field

from prompt_optimizer_graders.pkm import result
from optimizer import (PASS_THRESHOLD, Criterion, GraderConfig, GraderResult, JudgeError, Task, Trial, ask, grader,
                       judge)
from prompt_optimizer_outcomes.pkm import PKMOutcome, segments

HERE = Path(__file__).resolve().parent
CRITERIA = HERE / "rubrics" / "criteria"
KNOWLEDGE_BUDGET = 8000
"""Characters of knowledge-base text shown to the insight judge."""
FILE_BUDGET = 6000
"""Characters of one file side shown to the coherence judge before it is cut around the change."""
CONTEXT_LINES = 40
MAX_FILES = 3

CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
STOPWORDS = frozenset("""
this that with from have been were they them their there these those what when where which while will would
could should about into than then also just only very more most some such your yours ours mine like over
after before again still even each other note notes file files here because being does done make made
""".split())


class JudgeConfig(GraderConfig):
    threshold: float = Field(default=PASS_THRESHOLD, ge=0.0, le=1.0)


# ---------------------------------------------------------------- words and sentences


def words(text: str) -> set[str]:
    found: set[str] = set()
    for run in re.findall(r"[^\W_]+", text.lower()):
        for piece in re.split(f"({CJK.pattern})", run):
            if not piece:
                continue
            if CJK.fullmatch(piece):
                found.update(piece[i:i + 2] for i in range(len(piece) - 1))
            elif len(piece) >= 4 and piece not in STOPWORDS:
                found.add(piece)
    return found


def word_count(text: str) -> int:
    latin = re.findall(r"[^\W_]+", CJK.sub(" ", text))
    return len(latin) + sum(len(run) for run in CJK.findall(text)) // 2


def sentence_count(text: str) -> int:
    return len([part for part in re.split(r"[.!?。！？]+(?:\s+|$)", text.strip()) if part.strip()])


def _band(value: float, high: float, low: float) -> float:
    return 1.0 if value >= high else 0.5 if value >= low else 0.0


# ---------------------------------------------------------------- insight quality


def offline_insight(inputs: dict[str, str]) -> dict[str, Any]:
    insight = words(inputs.get("insight", ""))
    if not insight:
        return {"rationale": "the insight has no words to judge", "groundedness": 0.0, "non_redundancy": 0.0,
                "expression": 0.0}
    note = words(inputs.get("note", ""))
    known = note | words(inputs.get("knowledge", ""))
    grounded = len(insight & known) / len(insight)
    new = len(insight - note) / len(insight)
    sentences, count = sentence_count(inputs["insight"]), word_count(inputs["insight"])
    expression = 1.0 if 1 <= sentences <= 3 and 6 <= count <= 90 else \
        0.5 if sentences <= 5 and 3 <= count <= 150 else 0.0
    return {"rationale": f"{grounded:.0%} of its words are in the note or files, {new:.0%} are not in the note; "
                         f"{sentences} sentence(s), {count} words",
            "groundedness": _band(grounded, 0.5, 0.25), "non_redundancy": _band(new, 0.2, 0.05),
            "expression": expression}


def _unit(value: Any, name: str, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number from 0 to 1, got {value!r}")
    return float(value)


def check_insight(outputs: dict[str, Any]) -> dict[str, Any]:
    checked = {name: _unit(outputs.get(name), name, allow_none=True)
               for name in ("groundedness", "non_redundancy", "expression")}
    if all(value is None for value in checked.values()):
        raise ValueError("all three scores are unknown")
    return {"rationale": str(outputs.get("rationale") or "").strip(), **checked}


def score_insight(outputs: dict[str, Any]) -> float:
    known = [outputs[name] for name in ("groundedness", "non_redundancy", "expression") if outputs[name] is not None]
    return sum(known) / len(known)


def _signature(name: str):
    def build(instructions: str):
        from prompt_optimizer_graders import _judge_signatures

        return getattr(_judge_signatures, name)(instructions)

    return build


INSIGHT_JUDGE = judge(
    "pkm_insight_quality", rubric=HERE / "rubrics" / "pkm_insight_quality.md",
    signature=_signature("insight_quality"),
    output_fields=("rationale", "groundedness", "non_redundancy", "expression"),
    check=check_insight, score=score_insight,
    calibration=HERE / "calibration" / "pkm_insight_quality.jsonl",
    criteria=(Criterion("groundedness", CRITERIA / "pkm_insight_quality.groundedness.md",
                        ("note", "knowledge", "insight")),
              Criterion("non_redundancy", CRITERIA / "pkm_insight_quality.non_redundancy.md", ("note", "insight")),
              Criterion("expression", CRITERIA / "pkm_insight_quality.expression.md", ("insight",))))(offline_insight)


# ---------------------------------------------------------------- append coherence


def _style(line: str) -> str:
    stripped = line.strip()
    if re.match(r"^([-*+]|\d+[.)])\s", stripped):
        return "bullets"
    if re.match(r"^#{2,6}\s", stripped):
        return "sections"
    if stripped.startswith("|"):
        return "table"
    if stripped.startswith(("#", "<!--", "---")):
        return "other"
    return "paragraphs"


def dominant_style(text: str) -> str:
    counts = {"bullets": 0, "sections": 0, "table": 0, "paragraphs": 0}
    for line in text.splitlines():
        if line.strip():
            style = _style(line)
            if style in counts:
                counts[style] += 1
    if counts["table"] > max(counts["bullets"], counts["paragraphs"]):
        return "table"
    if counts["bullets"] > counts["paragraphs"]:
        return "bullets"
    if counts["sections"] >= 2:
        return "sections"
    return "paragraphs"


def offline_coherence(inputs: dict[str, str]) -> dict[str, Any]:
    before, after = inputs.get("before", ""), inputs.get("after", "")
    old_lines = [line.strip() for line in before.splitlines() if line.strip() and "not shown" not in line]
    new_lines = {line.strip() for line in after.splitlines()}
    kept = sum(1 for line in old_lines if line in new_lines)
    if old_lines and kept / len(old_lines) < 0.9:
        return {"rationale": f"only {kept} of {len(old_lines)} existing lines survive the edit", "coherence": 0.0}
    old_set = set(old_lines)
    added = [line for line in after.splitlines()
             if line.strip() and line.strip() not in old_set and not re.fullmatch(r"\s*<!--.*-->\s*", line)]
    style = dominant_style(before)
    matching = [line for line in added if _style(line) == style]
    if added and matching:
        return {"rationale": f"existing lines kept; the added text follows the file's {style}", "coherence": 1.0}
    return {"rationale": f"existing lines kept, but the added text does not follow the file's {style}",
            "coherence": 0.5}


def check_coherence(outputs: dict[str, Any]) -> dict[str, Any]:
    value = _unit(outputs.get("coherence"), "coherence", allow_none=False)
    return {"rationale": str(outputs.get("rationale") or "").strip(), "coherence": min((0.0, 0.5, 1.0),
                                                                                    key=lambda v: abs(v - value))}


COHERENCE_JUDGE = judge(
    "pkm_append_coherence", rubric=HERE / "rubrics" / "pkm_append_coherence.md",
    signature=_signature("append_coherence"), output_fields=("rationale", "coherence"),
    check=check_coherence, score=lambda outputs: outputs["coherence"],
    calibration=HERE / "calibration" / "pkm_append_coherence.jsonl",
    criteria=(Criterion("coherence", CRITERIA / "pkm_append_coherence.coherence.md", ("before", "after")),))(
    offline_coherence)


# ---------------------------------------------------------------- what the judges are shown


def around_change(before: str, after: str, budget: int = FILE_BUDGET) -> tuple[str, str]:
    """Both sides whole when they fit the budget; otherwise the lines around the change."""
    if len(before) + len(after) <= 2 * budget:
        return before, after
    old, new = before.splitlines(), after.splitlines()
    blocks = [b for b in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes() if b[0] != "equal"]
    if not blocks:
        return before[:budget], after[:budget]
    first_old, last_old = blocks[0][1], blocks[-1][2]
    first_new, last_new = blocks[0][3], blocks[-1][4]
    return (_window(old, first_old, last_old), _window(new, first_new, last_new))


def _window(lines: list[str], start: int, end: int) -> str:
    low, high = max(0, start - CONTEXT_LINES), min(len(lines), end + CONTEXT_LINES)
    head = lines[:5] if low > 5 else lines[:low]
    parts = head + ([f"[... {low - len(head)} lines not shown ...]"] if low > len(head) else [])
    parts += lines[low:high]
    if high < len(lines):
        parts.append(f"[... {len(lines) - high} lines not shown ...]")
    return "\n".join(parts) + "\n"


def knowledge_text(state: PKMOutcome) -> str:
    """The files the agent read or changed, as the insight judge sees them (capped)."""
    files = state.files
    fact_id = state.fact_id or ""
    ordered = sorted(files, key=lambda path: (path not in state.filed_in, path))
    parts, used = [], 0
    for path in ordered:
        text = files[path].after if files[path].after is not None else files[path].before
        if not text:
            continue
        room = min(KNOWLEDGE_BUDGET - used, 3000)
        if room <= 200:
            break
        if len(text) > room:
            at = max(text.find(fact_id), 0) if fact_id else 0
            start = max(0, at - room // 2)
            text = ("[...]\n" if start else "") + text[start:start + room] + "\n[...]"
        parts.append(f"=== {path} ===\n{text.strip()}")
        used += len(parts[-1])
    return "\n\n".join(parts)


def _edited_existing(state: PKMOutcome) -> list[tuple[str, str, str]]:
    """(path, before, after) of each file that existed in the fixture and was edited in place or
    after a move (a pure move is not an edit)."""
    files = state.files
    origin_of = {event["path"]: event.get("origin") or event["path"] for event in state.events}
    edited = []
    for path in state.modified + state.created:
        origin = origin_of.get(path, path)
        before = files[origin].before if origin in files else None
        after = files[path].after if path in files else None
        if before is not None and after is not None and before != after:
            edited.append((path, before, after))
    return edited[:MAX_FILES]


@grader(config=JudgeConfig, version="1", judge=INSIGHT_JUDGE, agent="pkm_agent")
def pkm_insight_quality(task: Task, trial: Trial, config: JudgeConfig) -> GraderResult:
    state = trial.outcome.read(PKMOutcome)
    if state.skip_path():
        return result(None, True, "not applicable: the trial skipped")
    insight = (state.insight.text if state.insight else "") or ""
    if not insight.strip():
        return result(0.0, False, "no insight was written")
    verdict = ask(INSIGHT_JUDGE, {"note": task.input.content, "knowledge": knowledge_text(state),
                                  "insight": insight})
    outputs = verdict.outputs
    shown = ", ".join(f"{k} {v:g}" if v is not None else f"{k} unknown" for k, v in outputs.items() if k != "rationale")
    return result(verdict.score, verdict.score >= config.threshold, f"{shown}: {outputs['rationale']}",
                  **verdict.details(INSIGHT_JUDGE))


@grader(config=JudgeConfig, version="1", judge=COHERENCE_JUDGE, agent="pkm_agent")
def pkm_append_coherence(task: Task, trial: Trial, config: JudgeConfig) -> GraderResult:
    edited = _edited_existing(trial.outcome.read(PKMOutcome))
    if not edited:
        return result(None, True, "not applicable: no existing file was edited")
    scores, notes, details = [], [], {}
    for path, before, after in edited:
        shown_before, shown_after = around_change(before, after)
        verdict = ask(COHERENCE_JUDGE, {"path": "/".join(segments(path)), "before": shown_before,
                                        "after": shown_after})
        scores.append(verdict.score)
        notes.append(f"{path}: {verdict.score:g} ({verdict.outputs['rationale']})")
        details = verdict.details(COHERENCE_JUDGE) | {"per_file": dict(zip([p for p, _, _ in edited], scores))}
    score = sum(scores) / len(scores)
    return result(score, score >= config.threshold, "; ".join(notes), **details)


__all__ = ["COHERENCE_JUDGE", "INSIGHT_JUDGE", "JudgeError", "offline_coherence", "offline_insight"]
