"""The PKM Agent's file tools, run inside the sandbox, with a log of every read and change.

Each handler takes the model's arguments and returns a `ToolOutput`; a bad argument or a refused
path is a tool error the model can correct, never an exception. Successful reads and changes are
appended to `events` in order, each naming the file's *origin* (its path in the fixture, followed
through moves), which is what the read-before-write grader compares.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import filing
from .sandbox import Sandbox, SandboxError, plain_files, read_file, write_file
from .state import has_marker, marker_for
from ..texts import texts
from optimizer import Tool, ToolOutput, tool_error
from prompt_optimizer_outcomes.pkm import PARA_ROOTS

SCHEMAS = {schema["function"]["name"]: schema
           for schema in json.loads((Path(__file__).parent / "tools.json").read_text(encoding="utf-8"))}
READ_LIMIT = 2000
LS_LIMIT = 1000
GLOB_LIMIT = 100
GREP_LIMIT = 200
MUTATIONS = ("write", "edit", "move", "remove")


@dataclass
class Insight:
    fact_id: str
    text: str
    related_fact_ids: list[str] = field(default_factory=list)


@dataclass
class PKMTools:
    sandbox: Sandbox
    fact_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    insight: Insight | None = None
    skip_evidence: str | None = None
    _origins: dict[str, str] = field(default_factory=dict)
    _listing: tuple[int, tuple[list[str], list[str]]] | None = None

    # ------------------------------------------------------------ bookkeeping

    def origin(self, relative: str) -> str:
        return self._origins.get(relative, relative)

    def _log(self, op: str, path: str, **extra: Any) -> None:
        self.events.append({"op": op, "path": path, "origin": self.origin(path), **extra})

    @property
    def mutations(self) -> int:
        """Changes made to the tree so far (each successful Write, Edit, Move or Remove logs one)."""
        return sum(1 for event in self.events if event["op"] in MUTATIONS)

    @property
    def mutated(self) -> bool:
        return self.mutations > 0

    def filed(self) -> bool:
        """Some Markdown file under a PARA folder carries the note's marker (a symlink or a file
        with other hard links does not count: its text may be a file outside PKM/)."""
        return any(has_marker(data.decode("utf-8", errors="replace"), self.fact_id)
                   for root in PARA_ROOTS for _, data in plain_files(self.sandbox.root / root, ".md"))

    def tools(self) -> list[Tool]:
        handlers: dict[str, Callable[[dict[str, Any]], ToolOutput]] = {
            "file_note": self.file_note, "Read": self.read, "BatchRead": self.batch_read, "Write": self.write, "Edit": self.edit,
            "Move": self.move, "Remove": self.remove, "LS": self.ls, "Glob": self.glob, "Grep": self.grep,
            "update_timeline_card_insight": self.update_insight, "skip_pkm_organization": self.skip,
        }
        terminal = {"skip_pkm_organization": True, "update_timeline_card_insight": self.filed,
                    "file_note": lambda: self.filed() and self.insight is not None}
        narrow = {"file_note": self._narrow_file_note, "Read": self._narrow_read, "BatchRead": self._narrow_batch_read, "Edit": self._narrow_edit,
                  "LS": self._narrow_ls}
        return [Tool(SCHEMAS[name], _guarded(handler), terminal=terminal.get(name, False), narrow=narrow.get(name))
                for name, handler in handlers.items()]

    # ------------------------------------------------------------ arguments that can work

    def _existing(self) -> tuple[list[str], list[str]]:
        """The Markdown files and the folders of the knowledge base now (links left out), listed
        again only after the tree changed."""
        if self._listing is None or self._listing[0] != self.mutations:
            files = [self.sandbox.relative(path) for path, _ in plain_files(self.sandbox.root, ".md")]
            folders = set()
            for directory, subfolders, _ in os.walk(self.sandbox.root):  # a linked folder is not entered
                here = Path(directory)
                subfolders[:] = [name for name in subfolders if not (here / name).is_symlink()]
                if here != self.sandbox.root:
                    folders.add(self.sandbox.relative(here))
            self._listing = (self.mutations, (files, sorted(folders)))
        return self._listing[1]

    def folders(self) -> list[str]:
        """The folders of the knowledge base now (links left out)."""
        return self._existing()[1]

    def _narrow_file_note(self) -> dict[str, Any]:
        """A folder from the listing (or a PARA folder): a choice among listed targets."""
        declared = SCHEMAS["file_note"]["function"]["parameters"]
        return _object({**declared["properties"], "folder": {"enum": filing.para_folders(self.folders())}},
                       required=declared["required"])

    def _narrow_read(self) -> dict[str, Any] | None:
        """Read a file that exists (whole: the knowledge base's files are short)."""
        files, _ = self._existing()
        return _object({"path": {"enum": files}}) if files else None

    def _narrow_batch_read(self) -> dict[str, Any] | None:
        files, _ = self._existing()
        return _object({"paths": {"type": "array", "items": {"enum": files}, "minItems": 1, "maxItems": 20}}
                       ) if files else None

    def _narrow_edit(self) -> dict[str, Any] | None:
        files, _ = self._existing()
        if not files:
            return None
        declared = SCHEMAS["Edit"]["function"]["parameters"]["properties"]
        return _object({**declared, "path": {"enum": files}}, required=["path", "old_string", "new_string"])

    def _narrow_ls(self) -> dict[str, Any] | None:
        _, folders = self._existing()
        return _object({"path": {"enum": ["", *folders]}})

    # ------------------------------------------------------------ reading

    def read(self, args: dict[str, Any]) -> ToolOutput:
        path = self.sandbox.resolve(args.get("path"))
        text = _read_text(path, args.get("path"))
        offset = _int(args.get("offset"), 1, "offset")
        limit = min(_int(args.get("limit"), READ_LIMIT, "limit"), READ_LIMIT)
        lines = text.splitlines()
        shown = lines[offset - 1: offset - 1 + limit]
        body = "\n".join(f"{number:>6}\t{line}" for number, line in enumerate(shown, start=offset))
        relative = self.sandbox.relative(path)
        self._log("read", relative)
        if offset - 1 + limit < len(lines):
            body += (f"\n(lines {offset}-{offset + len(shown) - 1} of {len(lines)}; "
                     f"pass offset={offset + len(shown)} to read on)")
        return ToolOutput(body if lines else "(empty file)")

    def batch_read(self, args: dict[str, Any]) -> ToolOutput:
        paths = args.get("paths")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise SandboxError("paths must be a non-empty list of paths relative to PKM/")
        parts, failed = [], False
        for raw in paths[:20]:
            result = _guarded(self.read)({"path": raw})
            failed = failed or result.is_error
            parts.append(f"==> {raw} <==\n{result.text}")
        return ToolOutput("\n\n".join(parts), is_error=failed)

    def ls(self, args: dict[str, Any]) -> ToolOutput:
        folder = self.sandbox.resolve(args.get("path") or "", allow_root=True)
        if not folder.is_dir():
            raise SandboxError(f"{args.get('path')!r} is not a folder inside PKM/")
        depth = max(1, min(_int(args.get("depth"), 2, "depth"), 3))
        lines: list[str] = []

        def walk(directory: Path, level: int) -> None:
            for child in sorted(directory.iterdir(), key=lambda p: (not p.is_dir(), p.name)):
                if len(lines) >= LS_LIMIT:
                    return
                if child.is_symlink():
                    lines.append("  " * level + child.name + " (symlink: not followed)")
                    continue
                lines.append("  " * level + child.name + ("/" if child.is_dir() else ""))
                if child.is_dir() and level + 1 < depth:
                    walk(child, level + 1)

        walk(folder, 0)
        if len(lines) >= LS_LIMIT:
            lines.append(f"(stopped at {LS_LIMIT} entries; list a subfolder)")
        return ToolOutput("\n".join(lines) or "(empty folder)")

    def glob(self, args: dict[str, Any]) -> ToolOutput:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern.strip():
            raise SandboxError("pattern must be a glob such as **/*.md")
        self.sandbox.resolve(pattern.split("*")[0] or ".", allow_root=True)  # refuses absolute and '..'
        if ".." in Path(pattern).parts:
            raise SandboxError("'..' may not leave PKM/")
        matches = [p for p in self.sandbox.root.glob(pattern) if self.sandbox.is_plain_file(p)]
        matches.sort(key=lambda p: (-p.stat().st_mtime, self.sandbox.relative(p)))
        shown = [self.sandbox.relative(p) for p in matches[:GLOB_LIMIT]]
        more = f"\n({len(matches) - GLOB_LIMIT} more not shown)" if len(matches) > GLOB_LIMIT else ""
        return ToolOutput("\n".join(shown) + more if shown else "no files match")

    def grep(self, args: dict[str, Any]) -> ToolOutput:
        try:
            regex = re.compile(str(args.get("pattern") or ""))
        except re.error as exc:
            raise SandboxError(f"invalid regular expression: {exc}") from None
        base = self.sandbox.resolve(args.get("path") or "", allow_root=True)
        # under a folder, symlinks and files with other hard links are skipped, as undecodable files are
        files = [(base, read_file(base, args.get("path")))] if base.is_file() else plain_files(base)
        file_glob = args.get("glob")
        hits = []
        for file, data in files:
            relative = self.sandbox.relative(file)
            if file_glob and not fnmatch.fnmatch(relative, file_glob):
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    hits.append(f"{relative}:{number}: {line}")
                    if len(hits) >= GREP_LIMIT:
                        return ToolOutput("\n".join(hits) + f"\n(stopped at {GREP_LIMIT} matches)")
        return ToolOutput("\n".join(hits) or "no matches")

    # ------------------------------------------------------------ changing

    def write(self, args: dict[str, Any]) -> ToolOutput:
        path = self._markdown(args.get("path"))
        content = args.get("content")
        if not isinstance(content, str):
            raise SandboxError("content must be the whole file text")
        data = Sandbox.check_size(content)
        if path.is_dir():
            raise SandboxError(f"{args.get('path')!r} is a folder")
        existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, data, args.get("path"))
        relative = self.sandbox.relative(path)
        self._log("write", relative, existed=existed)
        return ToolOutput(f"{'replaced' if existed else 'created'} {relative} ({len(content.splitlines())} lines)")

    def edit(self, args: dict[str, Any]) -> ToolOutput:
        path = self._markdown(args.get("path"))
        old, new = args.get("old_string"), args.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            raise SandboxError("old_string (non-empty) and new_string must be strings")
        text = _read_text(path, args.get("path"))
        count = text.count(old)
        if count == 0:
            raise SandboxError(f"old_string was not found in {args.get('path')}: Read the file and copy the text exactly")
        replace_all = args.get("replace_all") is True
        if count > 1 and not replace_all:
            raise SandboxError(f"old_string occurs {count} times in {args.get('path')}: include more surrounding "
                               "text to make it unique, or set replace_all")
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        write_file(path, Sandbox.check_size(updated), args.get("path"))
        relative = self.sandbox.relative(path)
        self._log("edit", relative, replacements=count if replace_all else 1)
        return ToolOutput(f"edited {relative} ({count if replace_all else 1} replacement(s))")

    def move(self, args: dict[str, Any]) -> ToolOutput:
        src = self.sandbox.resolve(args.get("src"))
        dst = self.sandbox.resolve(args.get("dst"))
        if not src.exists():
            raise SandboxError(f"{args.get('src')!r} does not exist: use LS or Glob to find it")
        if src.is_file() and src.suffix.lower() != ".md":
            raise SandboxError("only Markdown (.md) files and folders can be moved")
        if dst.exists():
            raise SandboxError(f"{args.get('dst')!r} already exists: choose a new name or Edit that file")
        if src.is_dir() and dst.resolve().is_relative_to(src.resolve()):
            raise SandboxError("a folder cannot be moved into itself")
        old_rel, new_rel = self.sandbox.relative(src), self.sandbox.relative(dst)
        moved = [self.sandbox.relative(p) for p in ([src] if src.is_file() else sorted(src.rglob("*")))]
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dst))
        for relative in moved:
            renamed = new_rel + relative[len(old_rel):]
            self._origins[renamed] = self._origins.pop(relative, relative)
        self._log("move", new_rel, src=old_rel)
        return ToolOutput(f"moved {old_rel} to {new_rel}")

    def remove(self, args: dict[str, Any]) -> ToolOutput:
        path = self.sandbox.resolve(args.get("path"))
        if not path.exists():
            raise SandboxError(f"{args.get('path')!r} does not exist")
        relative = self.sandbox.relative(path)
        if path.is_dir():
            shutil.rmtree(path)
        elif path.suffix.lower() != ".md":
            raise SandboxError("only Markdown (.md) files and folders can be removed")
        else:
            path.unlink()
        self._log("remove", relative)
        return ToolOutput(f"removed {relative}")

    def file_note(self, args: dict[str, Any]) -> ToolOutput:
        """Append the entry (with the marker) to a file, or create it, and save the insight; an
        existing file not yet read nor written in this trial is shown instead (see `filing`)."""
        path = filing.target(self.sandbox, args.get("folder"), args.get("file"))
        entry, insight = args.get("entry"), args.get("insight")
        if not isinstance(entry, str) or not entry.strip():
            raise SandboxError("entry must be the note as it should read in the file")
        relative = self.sandbox.relative(path)
        existed = path.exists()
        text = _read_text(path, relative) if existed else ""
        if has_marker(text, self.fact_id):
            raise SandboxError(f"the note is already filed in {relative}")
        says = texts("pkm_agent.filing.yaml")
        if existed and self.origin(relative) not in self._known():
            start = max(1, len(text.splitlines()) - filing.SHOWN_LINES + 1)
            shown = self.read({"path": relative, "offset": start})
            return ToolOutput(says["shown"].format(path=relative, file=shown.text), again=True)
        data = Sandbox.check_size(filing.appended(text, filing.with_marker(entry, marker_for(self.fact_id))))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, data, relative)
        if existed:
            self._log("edit", relative)
        else:
            self._log("write", relative, existed=False)
        if not isinstance(insight, str) or not insight.strip():
            return ToolOutput(says["filed_no_insight"].format(path=relative))
        self.insight = Insight(fact_id=self.fact_id, text=insight.strip())
        return ToolOutput(says["filed"].format(path=relative))

    def _known(self) -> set[str]:
        """The files (by origin) this trial has read or written: the agent knows what they hold."""
        return {event["origin"] for event in self.events if event["op"] in ("read", "write", "edit")}

    # ------------------------------------------------------------ finishing

    def update_insight(self, args: dict[str, Any]) -> ToolOutput:
        fact_id, text = args.get("fact_id"), args.get("insight_text")
        related = args.get("related_fact_ids") or []
        problems = []
        if fact_id != self.fact_id:
            problems.append(f"fact_id must be the note's Raw Input ID {self.fact_id!r}, not {fact_id!r}")
        if not isinstance(text, str) or not text.strip():
            problems.append("insight_text must be one to three sentences")
        if not isinstance(related, list) or not all(isinstance(r, str) for r in related):
            problems.append("related_fact_ids must be a list of fact_id strings")
        if problems:
            return tool_error(problems)
        self.insight = Insight(fact_id=fact_id, text=text.strip(), related_fact_ids=list(related))
        return ToolOutput("insight saved on the timeline card")

    def skip(self, args: dict[str, Any]) -> ToolOutput:
        evidence = args.get("evidence")
        if not isinstance(evidence, str) or not evidence.strip():
            return tool_error(["evidence must say why this input should not be filed"])
        self.skip_evidence = evidence.strip()
        return ToolOutput("skipped: nothing will be filed for this note")

    # ------------------------------------------------------------ helpers

    def _markdown(self, raw: object) -> Path:
        path = self.sandbox.resolve(raw)
        if path.suffix.lower() != ".md":
            raise SandboxError(f"{raw!r} refused: the knowledge base holds Markdown files; use a .md name")
        return path


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or list(properties)}


def _guarded(handler: Callable[[dict[str, Any]], ToolOutput]) -> Callable[[dict[str, Any]], ToolOutput]:
    def run(args: dict[str, Any]) -> ToolOutput:
        try:
            return handler(args if isinstance(args, dict) else {})
        except SandboxError as exc:
            return tool_error([str(exc)])
        except OSError as exc:
            return tool_error([f"{type(exc).__name__}: {exc.strerror or exc}"])

    return run


def _read_text(path: Path, raw: object) -> str:
    if path.is_dir():
        raise SandboxError(f"{raw!r} is a folder: use LS to list it")
    if not path.exists():
        raise SandboxError(f"{raw!r} does not exist: use LS or Glob to find the file")
    try:
        return read_file(path, raw).decode("utf-8")
    except UnicodeDecodeError:
        raise SandboxError(f"{raw!r} is not a UTF-8 text file") from None


def _int(value: object, default: int, name: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SandboxError(f"{name} must be a positive whole number")
    return value
