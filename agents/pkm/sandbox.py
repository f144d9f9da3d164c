"""The PKM Agent's sandbox: every path a tool receives resolves inside the trial's `PKM/` folder.

Refused with an error the agent can read and correct: empty paths, absolute paths (`/x`, `~/x`,
`C:\\x`), `..` segments, NUL bytes, names longer than 255 bytes or paths longer than 1024 bytes,
writes larger than 1 MiB, and links. No symlink is followed, wherever it points: each part of a
path is checked with `lstat`, and files are opened with `O_NOFOLLOW`. A file with more than one
hard link is neither read nor written: its other names may lie outside `PKM/`, and a write to it
would change that file too. `read_file`, `write_file` and `plain_files` apply the same rules for
the harness's own readers (reminders, the filed check, snapshots), which skip what they refuse.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator

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
        candidate = self.root
        for part in parts:  # what exists of the path, part by part, links not followed
            candidate = candidate / part
            try:
                info = os.lstat(candidate)
            except (FileNotFoundError, NotADirectoryError):  # the rest does not exist: nothing to follow
                return self.root.joinpath(*parts)
            if stat.S_ISLNK(info.st_mode):
                raise SandboxError(_symlink_refused(raw, self.relative(candidate)))
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                raise SandboxError(_links_refused(raw, info.st_nlink))
        return candidate

    def is_plain_file(self, path: Path) -> bool:
        """Whether `path` (found by a glob under the root) is a regular file with one link, reached
        through no symlink: what the tools read and list."""
        try:
            info = os.lstat(path)
        except OSError:
            return False
        return stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and path.resolve() == path and \
            path.is_relative_to(self.root)

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    @staticmethod
    def check_size(content: str) -> bytes:
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise SandboxError(f"refused: the content is {len(data):,} bytes, over the 1 MiB limit of one write")
        return data


def read_file(path: Path, shown: object) -> bytes:
    """The bytes of the regular file at `path`, which must not be a symlink or have another hard
    link (`SandboxError` naming it as `shown`). Its folders are the caller's to check."""
    with _open(path, shown, writing=False) as file:
        return file.read()


def write_file(path: Path, data: bytes, shown: object) -> None:
    """Replace the content of the file at `path` (created when missing) under the rules of
    `read_file`; a refused file is left as it was."""
    with _open(path, shown, writing=True) as file:
        file.truncate(0)
        file.write(data)


def plain_files(folder: Path, suffix: str = "") -> Iterator[tuple[Path, bytes]]:
    """Each file under `folder` whose name ends in `suffix`, sorted by path, with its content,
    found and read without following a symlink. A symlink (to a file or a folder), a file with
    other hard links and anything not a regular file is skipped."""
    if folder.is_symlink() or not folder.is_dir():
        return
    found = []
    for directory, _, names in os.walk(folder):  # followlinks=False: a linked folder is never entered
        found.extend(Path(directory, name) for name in names if name.endswith(suffix))
    for path in sorted(found):
        try:
            data = read_file(path, path.name)
        except (SandboxError, OSError):
            continue
        yield path, data


def _open(path: Path, shown: object, *, writing: bool) -> BinaryIO:
    """`path` opened without following a symlink (and without waiting on a FIFO), refused unless
    it is a regular file with one link: checked on the open file, so nothing can swap it after.
    Opened for writing, it is created when missing but not emptied (the caller does that)."""
    flags = (os.O_WRONLY | os.O_CREAT if writing else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        handle = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SandboxError(_symlink_refused(shown, shown)) from None
        raise
    file = os.fdopen(handle, "wb" if writing else "rb")  # fdopen opens nothing: "wb" does not empty it
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        file.close()
        raise SandboxError(_links_refused(shown, info.st_nlink) if stat.S_ISREG(info.st_mode) else
                           f"path {shown!r} refused: not a regular file")
    return file


def _symlink_refused(raw: object, link: object) -> str:
    return f"path {raw!r} refused: {link!r} is a symlink, and the tools never follow links"


def _links_refused(raw: object, links: int) -> str:
    return (f"path {raw!r} refused: the file has {links} hard links (other names, which may be outside PKM/); "
            "the tools read and change only files with one link")
