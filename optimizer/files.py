"""Atomic file writes: a reader (or a crash) never sees half a file."""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def read_input(path: Path, error: type[Exception], field: str | None = None) -> str:
    """The text of an input file (UTF-8); a file that cannot be read raises `error` (an
    `OptimizerError` class) naming the file, the setting that named it (`field`) and the fix."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error("the file does not exist", path=path, field=field, fix="check the path") from None
    except UnicodeDecodeError as exc:
        raise error(f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})", path=path, field=field,
                    fix="save the file as UTF-8") from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", path=path, field=field,
                    fix="check the file exists and is readable") from None


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
