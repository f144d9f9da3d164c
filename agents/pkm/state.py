"""The PKM Agent's Outcome: what the knowledge base looks like after the trial, against before.

`environment_state` keys (what the graders read):

| key | meaning |
|---|---|
| `fact_id`, `marker` | the note's Raw Input ID and the marker an entry filed for it must carry |
| `tree` | final files under PKM/, sorted, with line counts |
| `created`, `modified`, `deleted` | paths compared with the fixture (a moved file counts as deleted at its old path and created at its new one) |
| `moves` | `[src, dst]` pairs in order |
| `events` | successful reads and changes in order: `{op, path, origin}` (origin = path in the fixture, followed through moves) |
| `files` | `{path: {before, after}}` for every file read, created, modified or deleted (text, capped) |
| `markers_before`, `markers_after` | fact_id markers in the fixture / `{marker: [paths]}` at the end |
| `filed_in` | created or modified files that carry the note's marker |
| `diff` | unified diff of PKM/ against the fixture |
| `insight` | `{fact_id, text, related_fact_ids}` or null |
| `skipped`, `skip_evidence`, `mutated` | the skip path, and whether any change succeeded |
| `reminders` | the system notes the agent was shown |
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from agents.pkm.reminders import MARKER
from agents.pkm.sandbox import plain_files

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
                insight: dict[str, Any] | None, skip_evidence: str | None, reminders: list[str]) -> dict[str, Any]:
    created = sorted(set(after) - set(before))
    deleted = sorted(set(before) - set(after))
    modified = sorted(path for path in set(before) & set(after) if before[path] != after[path])
    read = {event["path"] for event in events if event["op"] == "read"}
    touched = sorted(read | set(created) | set(deleted) | set(modified))
    markers_after: dict[str, list[str]] = {}
    for path, text in after.items():
        for marker in MARKER.findall(text):
            markers_after.setdefault(marker, []).append(path)
    return {
        "fact_id": fact_id,
        "marker": marker_for(fact_id),
        "tree": [{"path": path, "lines": len(text.splitlines())} for path, text in sorted(after.items())],
        "created": created,
        "modified": modified,
        "deleted": deleted,
        "moves": [[event["src"], event["path"]] for event in events if event["op"] == "move"],
        "events": events,
        "files": {path: {"before": _cap(before.get(path)), "after": _cap(after.get(path))} for path in touched},
        "markers_before": sorted({m for text in before.values() for m in MARKER.findall(text)}),
        "markers_after": markers_after,
        "filed_in": [path for path in created + modified if has_marker(after[path], fact_id)],
        "diff": unified_diff(before, after),
        "insight": insight,
        "skipped": skip_evidence is not None,
        "skip_evidence": skip_evidence,
        "mutated": any(event["op"] in ("write", "edit", "move", "remove") for event in events),
        "reminders": reminders,
    }


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


def segments(path: str) -> list[str]:
    return [part for part in re.split(r"/+", path.strip().strip("/")) if part]
