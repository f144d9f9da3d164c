"""Every process a proposer command left running, wherever it went.

Killing the command's process group is not enough: a daemon it starts with `setsid` (or any
process that calls setsid(2)) leaves the group, outlives the command and can write to the
user's checkout after the check that follows the proposer. So while a command runs the optimizer
is a child subreaper (`PR_SET_CHILD_SUBREAPER`, Linux): a process among the command's
descendants whose parent exits is re-parented to us, not to init. Once the command has exited,
every process it left behind is then a child of ours in a session other than ours (the command
runs in a session of its own), or a descendant of one; `Reaper.stop_strays` kills them all and
reaps them. Under bubblewrap the sandbox's pid namespace already ends with the command; this
covers the unconfined case. A process handed to another service (`systemd-run`, `at`, a
container runtime) is not our descendant and is not covered: that is bubblewrap's part.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from typing import NamedTuple

from optimizer.procfs import prctl, stat_fields

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
ROUNDS = 200
"""Kill-and-look-again rounds (20 ms apart): a stray that forks while being killed is found again."""


class Reaper:
    """`with Reaper() as reaper:` around a command started in a session of its own; after it has
    exited, `reaper.stop_strays()` ends what it left running."""

    def __init__(self) -> None:
        self.before: set[int] = set()
        self._was: int | None = None

    def __enter__(self) -> Reaper:
        self._was = _subreaper()
        if self._was is not None:
            _set_subreaper(1)
        self.before = set(_children(_processes(), os.getpid()))
        return self

    def __exit__(self, *exc) -> None:
        if self._was is not None:
            _set_subreaper(self._was)

    def stop_strays(self, group: int) -> list[int]:
        """SIGKILL every process the command left (children of ours that were not ours before and
        run in another session, and all their descendants) and reap them. Returns the pids of
        those that had left the command's process `group`: what it left running on purpose (a
        member of the group may still be dying of the group's kill)."""
        left: set[int] = set()
        me, session = os.getpid(), os.getsid(0)
        for _ in range(ROUNDS):
            table = _processes()
            roots = {pid for pid in _children(table, me) if pid not in self.before and table[pid].session != session}
            if not roots:
                break
            for pid in roots | _descendants(table, roots):
                if not table[pid].exited:
                    _kill(pid)
                    if table[pid].group != group:
                        left.add(pid)
            for pid in roots:
                _reap(pid)
            time.sleep(0.02)
        return sorted(left)


class _Process(NamedTuple):
    parent: int
    group: int
    session: int
    exited: bool
    """A zombie: it has exited and waits to be reaped."""


def _processes() -> dict[int, _Process]:
    """Every process we can see, zombies included, by pid."""
    table: dict[int, _Process] = {}
    if not Path("/proc").is_dir():
        return table
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry.name)
        if fields is None or len(fields) < 4:  # it ended while being looked at
            continue
        table[int(entry.name)] = _Process(*map(int, fields[1:4]), exited=fields[0] == "Z")
    return table


def _children(table: dict[int, _Process], parent: int) -> list[int]:
    return [pid for pid, process in table.items() if process.parent == parent]


def _descendants(table: dict[int, _Process], roots: set[int]) -> set[int]:
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        frontier = {pid for pid, process in table.items() if process.parent in frontier} - found
        found |= frontier
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not (or no longer) ours to wait for
        pass


def _prctl(option: int, value) -> int:
    return prctl()(option, value, 0, 0, 0)


def _subreaper() -> int | None:
    """Whether this process is a child subreaper now (0 or 1), or None where it cannot be one."""
    if not Path("/proc/self/stat").exists():
        return None
    flag = ctypes.c_int(0)
    try:
        return flag.value if _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) == 0 else None
    except (OSError, AttributeError):  # no prctl in this libc
        return None


def _set_subreaper(value: int) -> None:
    _prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(value))
