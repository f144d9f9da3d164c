"""Filing a note in one call: the path a small model can follow.

On the embedded 1.5B model (`benchmarks/pkm_embedded.py`) the agent never looked at the knowledge
base: it saved the insight, was told the note was not filed, and skipped it; made to file instead,
it wrote to invented paths, edited with text it had never read and replaced whole files. So the
agent is shown the knowledge base up front (`listing`: each PARA folder with its files and their
first line), and `file_note` files the note in one call: a folder from that list (the only values
its schema allows), a file in it (an existing one to add to, or a new name), the entry and the
insight. The tool adds the fact_id marker and appends, never replaces. An existing file the agent
has not read in the trial is shown first (its end, as `Read` shows it) and nothing is written
until the call is made again, so the entry is written knowing the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from rank_bm25 import BM25Plus

from .sandbox import Sandbox, SandboxError, plain_files
from .state import marker_for
from optimizer.types import Task, ToolCallSpec
from prompt_optimizer_outcomes.pkm import MARKER, PARA_ROOTS

LISTED_FILES = 200
"""Files named in the listing; past them, folders only (the agent can still LS or Glob)."""
SUMMARY_CHARS = 60
CLOSEST = 3
"""Files named above the listing as the closest to the note."""
RANKED_CHARS = 8_000
"""Characters of each file the ranking reads (a file's start says what it is about)."""
SHOWN_LINES = 60
"""Lines of an existing file shown before the first entry is added to it (its end)."""
_ITEM = re.compile(r"^([-*+]|\d+[.)])\s")
_ABSOLUTE = re.compile(r"^([/~\\]|[A-Za-z]:)")
_WORD = re.compile(r"[^\W_\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]{3,}")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]+")


def summary(text: str) -> str:
    """A file's first non-empty line, without heading marks and fact_id markers, shortened."""
    for line in text.splitlines():
        line = MARKER.sub("", line).strip().lstrip("#").strip()
        if line:
            return line if len(line) <= SUMMARY_CHARS else line[:SUMMARY_CHARS - 1].rstrip() + "…"
    return ""


def para_folders(folders: list[str]) -> list[str]:
    """The folders a note may be filed in: the four PARA folders (even when missing: the first
    note creates its folder) and every folder inside them, in PARA order."""
    inside = [folder for folder in folders if folder.split("/")[0] in PARA_ROOTS]
    return sorted(set(PARA_ROOTS) | set(inside), key=lambda folder: (PARA_ROOTS.index(folder.split("/")[0]), folder))


def listing(root: Path, folders: list[str], more: str) -> str:
    """The PARA part of the knowledge base as the agent is shown it: each folder (ending in /; the
    knowledge base's `folders` and the PARA folders), then its files, each with its first line.
    Links are left out, as the tools leave them. `more` is the line for the files past
    `LISTED_FILES` ({count} placeholder)."""
    by_folder: dict[str, list[str]] = {}
    listed = hidden = 0
    for path, data in plain_files(root, ".md"):
        folder = path.parent.relative_to(root).as_posix()
        if folder.split("/")[0] not in PARA_ROOTS:
            continue
        if listed >= LISTED_FILES:
            hidden += 1
            continue
        listed += 1
        first = summary(data.decode("utf-8", errors="replace"))
        by_folder.setdefault(folder, []).append(f"  {path.name}: {first}" if first else f"  {path.name}")
    lines = []
    for folder in para_folders(folders):
        lines.append(folder + "/")
        lines.extend(by_folder.get(folder, []))
    if hidden:
        lines.append(more.format(count=hidden))
    return "\n".join(lines)


def words(text: str) -> list[str]:
    """What two texts can share: words of three letters or digits or more, lower-cased, and
    pairs of neighbouring characters in Chinese, Japanese and Korean runs (those scripts do not
    separate words with spaces). Markers are left out."""
    text = MARKER.sub(" ", text.lower())
    found = _WORD.findall(text)
    for run in _CJK.findall(text):
        found.extend(run[start:start + 2] for start in range(max(1, len(run) - 1)))
    return found


def ranked(root: Path, note: str) -> list[tuple[str, str]]:
    """The `CLOSEST` PARA files sharing the most words with the note, best first, each as its
    path and its first `RANKED_CHARS` characters; none when no file shares a word. Ranked by BM25+
    (Lv and Zhai, *Lower-bounding term frequency normalization*, CIKM 2011; `rank_bm25`), whose
    weights stay positive in a knowledge base of one or two files, over each file's path and
    those characters."""
    query = set(words(note))
    files, documents = [], []
    for path, data in plain_files(root, ".md"):
        relative = path.relative_to(root).as_posix()
        if relative.split("/")[0] in PARA_ROOTS:
            text = data[:RANKED_CHARS * 4].decode("utf-8", errors="replace")[:RANKED_CHARS]
            files.append((relative, text))
            documents.append(words(re.sub(r"[/_-]", " ", relative)) + words(text))
    shared = [index for index, document in enumerate(documents) if query & set(document)]
    if not shared:
        return []
    scores = BM25Plus(documents).get_scores(list(query))
    return [files[index] for index in sorted(shared, key=lambda index: (-scores[index], index))[:CLOSEST]]


def closest(root: Path, note: str, header: str) -> str:
    """`ranked`'s files under `header` (`named`); "" when there are none."""
    return named(ranked(root, note), header)


def named(files: list[tuple[str, str]], header: str) -> str:
    """`files` (as `ranked` gives them) under `header`, each as its path and first line; "" when
    there are none. The 1.5B agent filed into the first file its list showed, whatever the note
    said; this puts the likely places first and leaves the choice to it."""
    lines = [f"  {path}: {first}" if (first := summary(text)) else f"  {path}" for path, text in files]
    return "\n".join([header, *lines]) + "\n\n" if lines else ""


def target(sandbox: Sandbox, folder: object, file: object) -> Path:
    """The Markdown file `file_note` writes: `file` inside `folder` (a name starting with the
    folder, or with its last parts, repeats them and they are taken once; a name without a suffix
    gets `.md`). It must be inside a PARA folder; a path leaving the knowledge base is refused as
    the sandbox refuses it."""
    if not isinstance(folder, str) or not isinstance(file, str) or not file.strip():
        raise SandboxError("folder must be a folder from the list and file a file name such as notes.md")
    for given in (folder.strip(), file.strip()):
        if _ABSOLUTE.match(given):
            sandbox.resolve(given)  # raises: absolute paths are refused
    parts = [part for part in folder.strip().split("/") if part]
    name = [part for part in file.strip().split("/") if part]
    repeated = next((k for k in range(len(parts), 0, -1) if name[:k] == parts[-k:] and len(name) > k), 0)
    joined = "/".join(parts + name[repeated:])
    if not Path(joined).suffix:
        joined += ".md"
    path = sandbox.resolve(joined)
    relative = sandbox.relative(path)
    if "/" not in relative or relative.split("/")[0] not in PARA_ROOTS:
        raise SandboxError(f"{joined!r} refused: notes are filed in a folder under {', '.join(PARA_ROOTS)}")
    if path.suffix.lower() != ".md":
        raise SandboxError(f"{joined!r} refused: the knowledge base holds Markdown files; use a .md name")
    if path.is_dir():
        raise SandboxError(f"{joined!r} is a folder: name a file inside it")
    return path


def with_marker(entry: str, marker: str) -> str:
    """The entry with the note's marker at the end of its last line (unless it carries it)."""
    entry = entry.strip()
    return entry if marker in entry else f"{entry} {marker}"


def appended(text: str, entry: str) -> str:
    """`text` with `entry` added at its end: on the next line when both the file's last line and
    the entry are list items, after a blank line otherwise."""
    body = text.rstrip()
    if not body:
        return entry + "\n"
    last = body.splitlines()[-1].strip()
    gap = "\n" if _ITEM.match(last) and _ITEM.match(entry) else "\n\n"
    return body + gap + entry + "\n"


def demonstration(task: Task) -> list[ToolCallSpec]:
    """The calls a worked example of `task` shows (`optimizer.proposal.examples`): the note filed
    with one `file_note`, as the prompt asks, when its reference solution adds the note to one
    PARA file (an `Edit` that appends to a file, or a `Write` of a new one) and saves an insight;
    the reference calls as written otherwise (a skip, or a reorganisation that moves, removes or
    writes several files, which needs the other tools). The entry is the text the reference adds,
    without the note's marker, which `file_note` adds."""
    calls = task.reference_calls()
    writes = [call for call in calls if call.name in ("Write", "Edit")]
    insights = [call for call in calls if call.name == "update_timeline_card_insight"]
    if len(writes) != 1 or len(insights) != 1 or any(call.name in ("Move", "Remove") for call in calls):
        return calls
    write, arguments = writes[0], writes[0].arguments
    if write.name == "Edit":
        old, new = str(arguments.get("old_string", "")), str(arguments.get("new_string", ""))
        if not old or not new.startswith(old) or arguments.get("replace_all"):
            return calls
        entry = new[len(old):]
    else:
        entry = str(arguments.get("content", ""))
    entry = entry.replace(marker_for(task.input.resolved_fact_id()), "").strip()
    folder, _, file = str(arguments.get("path", "")).strip("/").rpartition("/")
    insight = insights[0].arguments.get("insight_text")
    if not entry or not folder or folder.split("/")[0] not in PARA_ROOTS or not isinstance(insight, str):
        return calls
    return [ToolCallSpec(name="file_note", arguments={"folder": folder, "file": file, "entry": entry,
                                                      "insight": insight})]
