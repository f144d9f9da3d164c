"""The PKM Agent's outcome, built from the knowledge base after the trial against before.

Its fields, what the graders read, are documented on `outcomes.pkm.PKMOutcome`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from .sandbox import plain_files
from prompt_optimizer_outcomes.pkm import MARKER, PKMOutcome

TEXT_CAP = 100_000
"""Characters of one file side kept in the outcome (the store keeps every trial's outcome)."""


def marker_for(fact_id: str) -> str:
    return f"<!-- fact_id: {fact_id} -->"


def has_marker(text: str, fact_id: str) -> bool:
    return fact_id in MARKER.findall(text)


def snapshot(pkm: Path) -> dict[str, str]:
    """Every file under PKM/ with its text; symlinks and files with other hard links are left out,
    as the tools leave them alone (their text may be a file outside PKM/)."""
    return {path.relative_to(pkm).as_posix(): data.decode("utf-8", errors="replace")
            for path, data in plain_files(pkm)}


def build_state(*, fact_id: str, before: dict[str, str], after: dict[str, str], events: list[dict[str, Any]],
                insight: dict[str, Any] | None, skip_evidence: str | None, reminders: list[str]) -> PKMOutcome:
    created = sorted(set(after) - set(before))
    deleted = sorted(set(before) - set(after))
    modified = sorted(path for path in set(before) & set(after) if before[path] != after[path])
    read = {event["path"] for event in events if event["op"] == "read"}
    touched = sorted(read | set(created) | set(deleted) | set(modified))
    markers_after: dict[str, list[str]] = {}
    for path, text in after.items():
        for marker in MARKER.findall(text):
            markers_after.setdefault(marker, []).append(path)
    return PKMOutcome(
        fact_id=fact_id,
        marker=marker_for(fact_id),
        tree=[{"path": path, "lines": len(text.splitlines())} for path, text in sorted(after.items())],
        created=created,
        modified=modified,
        deleted=deleted,
        moves=[[event["src"], event["path"]] for event in events if event["op"] == "move"],
        events=events,
        files={path: {"before": _cap(before.get(path)), "after": _cap(after.get(path))} for path in touched},
        markers_before=sorted({m for text in before.values() for m in MARKER.findall(text)}),
        markers_after=markers_after,
        filed_in=[path for path in created + modified if has_marker(after[path], fact_id)],
        diff=unified_diff(before, after),
        insight=insight,
        skipped=skip_evidence is not None,
        skip_evidence=skip_evidence,
        mutated=any(event["op"] in ("write", "edit", "move", "remove") for event in events),
        reminders=reminders,
    )


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    chunks = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        chunks.extend(difflib.unified_diff(
            (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null"))
    return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)


def _cap(text: str | None) -> str | None:
    if text is None or len(text) <= TEXT_CAP:
        return text
    return text[:TEXT_CAP] + "\n[... trimmed ...]\n"
