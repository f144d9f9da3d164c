"""One nightly job per repository: an exclusive `flock` on a lock file, held while the job runs.

The kernel decides who holds the lock, never the file's content. A job holds it for as long as
its process keeps the file open, and loses it when the process ends, however it ends: a killed
job's lock is never stale, so there is no takeover for two starting jobs to race over. The holder
writes `{pid, host, started_at, job}` into the file only so that a second job can say who holds
it; the content may be empty (the holder is still writing it), half-written or left by a killed
job, and none of that changes who holds the lock.

The holder removes the file before it lets go. A job that opened the file just before that would
otherwise lock a file no longer at the path while a third job locks a new one there; so a job
that takes the lock checks that the path still names the file it locked, and starts over if not.
For the same reason the file must not be removed by hand while a job runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from optimizer.errors import InputError

MAX_CONTENT_BYTES = 4096
"""What is read of a lock file for the message naming its holder (the holder writes ~120 bytes)."""


class LockHeld(InputError):
    """Another job holds the lock."""


@contextmanager
def job_lock(path: Path, job: str, log: Callable[[str], None] = print) -> Iterator[dict]:
    """Hold the lock at `path` for the `with` block, or raise `LockHeld` naming the holder.

    Yields what this job wrote into the file. A lock file left by a job that ended without
    removing it (killed) is reused, with a note through `log`."""
    me = {"pid": os.getpid(), "host": socket.gethostname(), "job": job,
          "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    handle = _acquire(path)
    try:
        previous = _content(handle)
        if previous is not None:
            log(f"taking over a stale lock: pid {previous.get('pid')} on {previous.get('host')} is no longer running "
                f"({previous.get('job')}, since {previous.get('started_at')})")
        os.ftruncate(handle, 0)
        os.pwrite(handle, json.dumps(me).encode("utf-8"), 0)
        try:
            yield me
        finally:
            if _names(path, handle):
                path.unlink()
    finally:
        os.close(handle)  # lets go of the lock


def _acquire(path: Path) -> int:
    """An open descriptor of the file at `path`, exclusively locked by this process."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the folder of the lock file: {exc.strerror or exc}", path=path,
                         fix="check that the state folder (state_dir) is writable") from None
    while True:
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise InputError(f"cannot open the lock file: {exc.strerror or exc}", path=path,
                             fix="check that the state folder (state_dir) is writable and the lock is a plain file") \
                from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _content(handle)
            os.close(handle)
            raise _held(path, holder) from None
        except OSError as exc:
            os.close(handle)
            raise InputError(f"cannot lock the lock file: {exc.strerror or exc}", path=path,
                             fix="keep the state folder (state_dir) on a file system that supports flock") from None
        except BaseException:
            os.close(handle)
            raise
        if _names(path, handle):
            return handle
        os.close(handle)  # its holder removed it between our open and our lock: lock the file now at the path


def _names(path: Path, handle: int) -> bool:
    """Whether `path` still names the file open as `handle`."""
    try:
        linked = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle)
    return (linked.st_dev, linked.st_ino) == (opened.st_dev, opened.st_ino)


def _content(handle: int) -> dict | None:
    """The holder a lock file names; None when it names none (empty, half-written, not ours)."""
    try:
        data = json.loads(os.pread(handle, MAX_CONTENT_BYTES, 0).decode("utf-8"))
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError), or nested absurdly
        return None
    return data if isinstance(data, dict) and "pid" in data else None


def _held(path: Path, holder: dict | None) -> LockHeld:
    fix = "wait for it to finish (or stop it); only one nightly job runs per repository"
    if holder is None:
        return LockHeld("another job is running on this repository (it has not yet written its pid into the lock "
                        "file)", path=path, fix=fix)
    if holder.get("host") != socket.gethostname():
        return LockHeld(f"another job ({holder.get('job')}) holds the lock on host {holder.get('host')} "
                        f"(pid {holder.get('pid')}, since {holder.get('started_at')})", path=path,
                        fix=f"wait for it to finish (or stop it on {holder.get('host')}); only one nightly job runs "
                            "per repository")
    return LockHeld(f"another job ({holder.get('job')}) is running on this repository: pid {holder.get('pid')}, "
                    f"since {holder.get('started_at')}", path=path, fix=fix)
