"""Reading input files within limits, and atomic writes: a reader (or a crash) never sees half a file."""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

MAX_INPUT_BYTES = 5 * 1024 * 1024
"""The largest input file read (a task file, suite.json, a settings file, a proposal script). The
suite's own task files are a few kilobytes; one of megabytes is a mistake, and large content
belongs in a fixture folder, which is copied, not parsed."""
MAX_JSON_DEPTH = 100
"""The deepest nesting of lists and objects accepted in JSON input. No input format here needs
more than a handful of levels; parsing one nested thousands deep exhausts Python's stack."""
_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
"""A JSON string (skipped: brackets inside it do not nest) or one bracket."""


def read_input(path: Path, error: type[Exception], field: str | None = None, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of an input file (UTF-8, with or without a byte-order mark); a file that cannot be read, or is larger than
    `max_bytes`, raises `error` (an `OptimizerError` class) naming the file, the setting that named
    it (`field`) and the fix. No more than `max_bytes` are read, whatever the file claims to hold."""
    try:
        with path.open(encoding="utf-8-sig") as handle:  # a byte-order mark (Windows editors) is read past
            if os.fstat(handle.fileno()).st_size > max_bytes:
                raise _too_large(path, error, field, max_bytes)
            text = handle.read(max_bytes + 1)  # a character is at least a byte
        if len(text) > max_bytes:
            raise _too_large(path, error, field, max_bytes)
        return text
    except FileNotFoundError:
        raise error("the file does not exist", path=path, field=field, fix="check the path") from None
    except UnicodeDecodeError as exc:
        raise error(f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})", path=path, field=field,
                    fix="save the file as UTF-8") from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", path=path, field=field,
                    fix="check the file exists and is readable") from None


def _too_large(path: Path, error: type[Exception], field: str | None, max_bytes: int) -> Exception:
    return error(f"too large: the file holds more than {max_bytes / 2**20:g} MB", path=path, field=field,
                 fix=f"keep it under {max_bytes / 2**20:g} MB: move large content into a fixture folder, or split "
                     "the file")


def parse_json(text: str, path: Path | str, error: type[Exception], field: str | None = None,
               fix: str = "fix the JSON syntax") -> Any:
    """`text`, the content of the input `path`, parsed as JSON. Text that is not JSON, or nests lists
    and objects deeper than `MAX_JSON_DEPTH`, raises `error` naming `path`, `field` and the fix
    (`fix` for a syntax error)."""
    check_json_depth(text, path, error, field)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}", path=path, field=field,
                    fix=fix) from None


def check_json_depth(text: str, path: Path | str, error: type[Exception], field: str | None = None) -> None:
    """Raise `error` when JSON `text` nests lists and objects deeper than `MAX_JSON_DEPTH`: checked
    before parsing, which recurses once per level."""
    if _nests_deeper(text, MAX_JSON_DEPTH):
        raise error(f"nested too deep: lists and objects more than {MAX_JSON_DEPTH} levels inside one another",
                    path=path, field=field,
                    fix=f"flatten the data: no input needs more than {MAX_JSON_DEPTH} levels of nesting")


def _nests_deeper(text: str, limit: int) -> bool:
    """Whether the lists and objects of JSON `text` nest more than `limit` deep, found without
    parsing it (so without recursion)."""
    if text.count("[") + text.count("{") <= limit:
        return False  # too few brackets to nest that deep
    depth = 0
    for token in _NESTING.finditer(text):
        if token.group() in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token.group() in ("]", "}"):
            depth -= 1
    return False


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a file."""
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False, default=str))


def write_text(path: Path, text: str) -> None:
    """Write atomically (a temporary file beside it, then a rename): a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o666 & ~_umask())  # what a plain open() would have given the file
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@functools.cache
def _umask() -> int:
    """The process's umask, read once: reading it means setting it, which is process-wide and so
    not something to do on every write while other threads create files."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


STATE_MARK = "<state folder>"
"""How a path in the state folder is shown when that folder lies outside the repository."""


def shown_path(path: Path | str | None, top: Path, state_dir: Path | None = None) -> str | None:
    """`path` as a commit message or a pull request shows it: relative to the repository's top
    folder `top`, else to the state folder (`<state folder>/runs/...`), never this machine's
    absolute path; None stays None."""
    if path is None:
        return None
    resolved = Path(path).resolve()
    for base, prefix in ((top, ""), (state_dir, f"{STATE_MARK}/")):
        if base is not None and resolved.is_relative_to(Path(base).resolve()):
            return prefix + resolved.relative_to(Path(base).resolve()).as_posix()
    return f"{STATE_MARK}/…/{resolved.name}"
