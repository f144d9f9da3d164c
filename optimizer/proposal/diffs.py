"""Unified diffs of a prompt file, made and read here only: the patch checks, the gate's named
buckets, the search's ranking, the request's rejected ideas and the viewer all take their lines
from this module. A line's kind comes from its hunk's counts, so a prompt's `---` rule removed
(`----` in the diff) is a removed line, not a file header."""

from __future__ import annotations

import difflib
import re


def unified(before: str, after: str, path: str) -> str:
    """`before` -> `after` of the file at `path`, as `git diff` shows it (a/ and b/ prefixes; a
    last line without its newline is followed by `\\ No newline at end of file`, not glued to
    the next line of the diff)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def kinds(diff: str) -> list[tuple[str, str]]:
    """Each line of the diff with its kind: `add` or `del` for a line it adds or removes (by the
    hunk's counts, so a removed `---` rule or an added `++` line is content, not a header),
    `hunk` for a hunk's header, `file` for the lines around hunks (`--- a/...`, `diff --git`),
    `context` for unchanged lines in a hunk. Lines with no hunk header at all (a fragment such as
    `+a new rule`) are read by their first character."""
    lines = diff.splitlines()
    if not any(HUNK.match(line) for line in lines):  # a fragment of added or removed lines, no hunks
        return [("file" if line.startswith(("+++ ", "--- ")) else
                 {"+": "add", "-": "del"}.get(line[:1], "context"), line) for line in lines]
    out, old, new = [], 0, 0
    for line in lines:
        if old or new:
            kind = {"+": "add", "-": "del", " ": "context"}.get(line[:1], "context" if not line else "file")
            if line.startswith("\\"):
                kind = "context"  # "\\ No newline at end of file"
            old -= kind in ("del", "context") and not line.startswith("\\")
            new -= kind in ("add", "context") and not line.startswith("\\")
            old, new = max(old, 0), max(new, 0)
        elif match := HUNK.match(line):
            kind = "hunk"
            old, new = (int(count) if count is not None else 1 for count in match.groups())
        else:
            kind = "file"
        out.append((kind, line))
    return out


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """(added, removed) lines, without their +/- marks, in order."""
    added, removed = [], []
    for kind, line in kinds(diff):
        if kind == "add":
            added.append(line[1:])
        elif kind == "del":
            removed.append(line[1:])
    return added, removed


def net_changed_lines(diff: str) -> tuple[set[str], set[str]]:
    """(added, removed) lines, stripped, blank ones left out, without the lines the diff both
    removes and adds (moved, or written again with another end of line: `\\ No newline at end of
    file`)."""
    added, removed = ({line.strip() for line in side if line.strip()} for side in changed_lines(diff))
    return added - removed, removed - added


def added_lines(diff: str) -> list[str]:
    """The lines the diff adds, stripped, blank ones left out."""
    return [line.strip() for line in changed_lines(diff)[0] if line.strip()]


def size(diff: str) -> int:
    """Lines the diff adds or removes."""
    added, removed = changed_lines(diff)
    return len(added) + len(removed)
