"""System reminders: observations about the knowledge base, computed before each model call.

They are data the agent sees, not rules the harness enforces:

* a file of >= 2000 lines must be restructured; one of > 1000 lines might be;
* a folder with more than 5 files that each hold at most one fact_id marker is fragmented;
* a file whose name contains a date (`20\\d{2}-?\\d{2}-?\\d{2}`) looks like a log;
* a file edited in 3 of the last 5 runs is becoming a catch-all (from `.pkm/edit_history.json`,
  which the agent appends to at the end of each trial).

The wording lives in `agents/prompts/pkm_agent.reminders.yaml`.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from .sandbox import SandboxError, plain_files, read_file
from ..texts import texts as wording
from prompt_optimizer_outcomes.pkm import MARKER

DATE_NAME = re.compile(r"20\d{2}-?\d{2}-?\d{2}")
MUST_SPLIT, CONSIDER_SPLIT = 2000, 1000
FRAGMENT_FILES = 5
CATCH_ALL_EDITS, HISTORY_RUNS = 3, 5


def load_history(state_dir: Path) -> list[dict]:
    """The last runs of `.pkm/edit_history.json`; none when it is missing, unreadable or a link."""
    path = state_dir / "edit_history.json"
    if state_dir.is_symlink() or not path.is_file():
        return []
    try:
        runs = json.loads(read_file(path, path.name)).get("runs", [])
    except (SandboxError, OSError, ValueError, AttributeError, RecursionError):
        return []
    return [run for run in runs if isinstance(run, dict)][-HISTORY_RUNS:]


def reminders(pkm: Path, history: list[dict]) -> list[str]:
    """The reminder lines for the knowledge base as it is now (empty when nothing stands out).
    Symlinks and files with other hard links are not part of it (see `agents.pkm.sandbox`)."""
    texts = wording("pkm_agent.reminders.yaml")
    notes: list[str] = []
    per_folder: dict[str, list[int]] = defaultdict(list)
    files = set()
    for path, data in plain_files(pkm, ".md"):
        relative = path.relative_to(pkm).as_posix()
        files.add(relative)
        text = data.decode("utf-8", errors="replace")
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines >= MUST_SPLIT:
            notes.append(texts["must_restructure"].format(path=relative, lines=lines))
        elif lines > CONSIDER_SPLIT:
            notes.append(texts["consider_restructure"].format(path=relative, lines=lines))
        if DATE_NAME.search(path.name):
            notes.append(texts["date_named"].format(path=relative))
        per_folder[path.parent.relative_to(pkm).as_posix()].append(len(MARKER.findall(text)))
    for folder, counts in sorted(per_folder.items()):
        if len(counts) > FRAGMENT_FILES and all(count <= 1 for count in counts):
            notes.append(texts["fragmented"].format(folder=folder if folder != "." else "PKM/", count=len(counts)))
    edits: dict[str, int] = defaultdict(int)
    for run in history:
        for edited in set(run.get("edited") or []):
            edits[edited] += 1
    for path, count in sorted(edits.items()):
        if count >= CATCH_ALL_EDITS and path in files:
            notes.append(texts["catch_all"].format(path=path, edits=count, runs=len(history)))
    return [texts["header"], *notes] if notes else []
