"""What the Linux kernel says about a process: its /proc/<pid>/stat line and prctl(2).

The reaper (which processes a proposer left), run ownership (whether a run's owner is alive) and
the local model's server (whether its supervisor still runs) read a process's stat line; the
reaper and the server both call prctl. They read and load them here, one way.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after `pid (comm)`, the state first (field 3 of proc(5), so
    the start time in clock ticks, field 22, is `[19]`), or None when there is no such process or
    no /proc. The command name may hold spaces and parentheses: the fields start after its last
    `)`."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:  # no such process (it may have ended while being looked at), or no /proc
        return None
    _, closing, rest = stat.rpartition(")")
    return rest.split() if closing else None


def alive(pid: int, started: str | None = None) -> bool:
    """Whether `pid` runs (a zombie, an exited child not yet reaped, does not) and, given
    `started` (its start time in clock ticks, `stat_fields(pid)[19]`), is the process that started
    then, not a later one given the same pid."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = stat_fields(pid)
    if fields is None:  # no /proc here, or it has just exited
        return True
    return fields[0] != "Z" and (started is None or fields[19] == started)


@lru_cache(maxsize=1)
def prctl() -> Callable[..., Any]:
    """libc's prctl(option, arg2, ...), loaded once. Loaded before a fork by whoever calls it in the
    child (a preexec function must not load libraries). Raises OSError or AttributeError where
    there is no such libc function."""
    import ctypes  # here: run ownership reads stat lines in every command, `optimizer history` too

    return ctypes.CDLL(None, use_errno=True).prctl
