"""The PKM Agent's sandbox: every path a tool receives resolves inside the trial's `PKM/` folder.

Refused with an error the agent can read and correct: empty paths, absolute paths (`/x`, `~/x`,
`C:\\x`), `..` segments, NUL bytes, names longer than 255 bytes or paths longer than 1024 bytes,
paths that lead out through a symlink, and writes larger than 1 MiB. The checks run on the
literal path first and then on the fully resolved one, so a symlink planted inside the tree
cannot be used to reach a file outside it.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

MAX_WRITE_BYTES = 1 << 20
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 1024
_DRIVE = re.compile(r"^[A-Za-z]:")


class SandboxError(Exception):
    """A path or write the sandbox refuses; the message is shown to the agent as a tool error."""


class Sandbox:
    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()

    def resolve(self, raw: object, *, allow_root: bool = False) -> Path:
        """The absolute path inside the sandbox for a path relative to PKM/."""
        if not isinstance(raw, str):
            raise SandboxError("the path must be a string relative to PKM/")
        if "\x00" in raw:
            raise SandboxError("the path contains a NUL byte")
        text = raw.strip().replace("\\", "/")
        if text.startswith(("/", "~")) or _DRIVE.match(text):
            raise SandboxError(f"absolute path {raw!r} refused: give a path relative to PKM/, "
                               "e.g. 'Areas/Health/running.md'")
        if len(text.encode("utf-8")) > MAX_PATH_BYTES:
            raise SandboxError(f"the path is longer than {MAX_PATH_BYTES} bytes")
        parts = [part for part in PurePosixPath(text).parts if part not in ("", ".")]
        if ".." in parts:
            raise SandboxError(f"path {raw!r} refused: '..' may not leave PKM/")
        for part in parts:
            if len(part.encode("utf-8")) > MAX_NAME_BYTES:
                raise SandboxError(f"the name {part[:40]!r}... is longer than {MAX_NAME_BYTES} bytes")
        if not parts and not allow_root:
            raise SandboxError("the path is empty: name a file or folder inside PKM/")
        candidate = self.root.joinpath(*parts)
        resolved = candidate.resolve(strict=False)
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise SandboxError(f"path {raw!r} refused: it leads outside PKM/ through a symlink")
        return candidate

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    @staticmethod
    def check_size(content: str) -> bytes:
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise SandboxError(f"refused: the content is {len(data):,} bytes, over the 1 MiB limit of one write")
        return data
