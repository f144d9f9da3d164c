"""One nightly job per repository: a lock file naming the process that holds it.

The lock is created atomically (`O_EXCL`) and holds JSON `{pid, host, started_at, job}`. A lock
whose process is gone (same host, pid not running) is stale and is taken over, with a note; a
lock from another host cannot be checked from here, so it is refused with the command that
removes it. The holder removes the file when it exits; after `kill -9` it stays and is then
recognised as stale.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from optimizer.errors import InputError


class LockHeld(InputError):
    """Another job holds the lock."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_lock(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None


@contextmanager
def job_lock(path: Path, job: str, log: Callable[[str], None] = print) -> Iterator[dict]:
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "job": job,
          "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    for _ in range(2):
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = read_lock(path)
            if holder is None:  # half-written or foreign content: its writer died while writing
                log(f"removing an unreadable lock file {path}")
                path.unlink(missing_ok=True)
                continue
            if holder.get("host") != me["host"]:
                raise LockHeld(f"another job ({holder.get('job')}) holds the lock on host {holder.get('host')} "
                               f"(pid {holder.get('pid')}, since {holder.get('started_at')})", path=path,
                               fix=f"wait for it, or if that job is gone, remove the lock: rm {path}") from None
            if _alive(int(holder.get("pid", -1))):
                raise LockHeld(f"another job ({holder.get('job')}) is running on this repository: pid "
                               f"{holder.get('pid')}, since {holder.get('started_at')}", path=path,
                               fix="wait for it to finish (or stop it); only one nightly job runs per repository") \
                    from None
            log(f"taking over a stale lock: pid {holder.get('pid')} on {holder.get('host')} is no longer running")
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(me, out)
        break
    else:
        raise LockHeld("could not take the lock", path=path, fix=f"remove {path} if no job is running")
    try:
        yield me
    finally:
        holder = read_lock(path)
        if holder and holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
            path.unlink(missing_ok=True)
