"""Who owns a running run or iteration, and whether that owner is still alive.

A row of `runs` or `iterations` whose status is `running` carries its owner: the host, the pid
and the process's start stamp (`owner_start`: the kernel's boot id, pid namespace and the
process's start time in clock ticks), and a heartbeat (`heartbeat_at`). The start stamp is what
keeps a reused pid from passing for the owner: a new process under the same pid has another.

On the owner's own machine (the same host name and the same boot and pid namespace) the owner is
alive exactly while a process with its pid and start stamp exists; that is checked in /proc,
without waiting for anything. A row owned on another machine (a team's PostgreSQL store) is
judged by its heartbeat: its owner is gone once the heartbeat is older than `LEASE_S`. A row
written before owners were recorded has only its start time, judged the same way.

Heartbeats come from one daemon thread per `Store` (`Heartbeat`), one UPDATE per table every
`HEARTBEAT_S` for all the rows this process owns, whatever the number of trials: the trial
writes stay as cheap as before, and a slow trial (minutes at a busy local model) does not let the
lease lapse as a heartbeat on every trial write would.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Connection, Table, func, select, update

from optimizer.procfs import stat_fields

HEARTBEAT_S = 30.0
"""How often a process stamps the rows it owns."""

LEASE_S = 300.0
"""How long a row owned on another machine stays its owner's without a heartbeat (ten missed
beats: a database that is slow for a while does not make a live job look gone)."""

HOST = socket.gethostname()

OWNER_COLUMNS = ("owner_host", "owner_pid", "owner_start", "heartbeat_at")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _machine() -> str | None:
    """This kernel boot and pid namespace (two containers of one host share a host name, not
    their pids); None where there is no /proc."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{boot}/{namespace}" if boot else None


MACHINE = _machine()


def start_stamp(pid: int) -> str | None:
    """The start stamp of the live process `pid` ("<machine>/<start ticks>"), or None when there
    is no such process (a zombie, killed but not yet reaped, counts as gone). Without /proc, the
    pid alone: a process of that pid exists."""
    if MACHINE is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "pid"
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return f"{MACHINE}/{fields[19]}"


def this_process() -> dict[str, Any]:
    """The owner columns naming this process (worked out again after a fork: a new pid)."""
    pid = os.getpid()
    return {"owner_host": HOST, "owner_pid": pid, "owner_start": start_stamp(pid)}


def is_gone(row: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether the owner of a running `row` (its owner columns and `started_at`) has ended."""
    stamp = row.get("owner_start")
    here = row.get("owner_host") == HOST and stamp is not None and (
        MACHINE is None or stamp.startswith(f"{MACHINE}/"))
    if here:
        return start_stamp(row["owner_pid"]) != stamp
    last = row.get("heartbeat_at") or row.get("started_at")
    if last is None:
        return True
    if last.tzinfo is None:  # SQLite gives times back without their zone, UTC
        last = last.replace(tzinfo=timezone.utc)
    return (now or datetime.now(timezone.utc)) - last > timedelta(seconds=LEASE_S)


def describe(row: dict[str, Any]) -> str:
    """The owner of `row` for a message: pid and host."""
    if row.get("owner_pid") is None:
        return "a process of an optimizer that recorded no owner"
    return f"pid {row['owner_pid']} on {row.get('owner_host')}"


def same_owner(table: Table, row: dict[str, Any]) -> list:
    """Conditions that hold while `row`'s owner and heartbeat are still what was read: an update
    under them is a compare-and-set, lost to whoever changed the row in between."""
    return [table.c[name].is_not_distinct_from(row[name]) for name in OWNER_COLUMNS]


def owner_rows(conn: Connection, key: Column, *conditions, extra: tuple = (), order=None) -> list[dict[str, Any]]:
    """Rows of `key`'s table that meet `conditions`: their key, status, start, owner and `extra` columns."""
    table = key.table
    columns = [key, table.c.status, table.c.started_at, *(table.c[name] for name in OWNER_COLUMNS), *extra]
    query = select(*columns).where(*conditions)
    return [dict(row) for row in conn.execute(query if order is None else query.order_by(order)).mappings()]


def close_gone(conn: Connection, key: Column) -> list[str]:
    """Mark `interrupted` the running rows of `key`'s table whose owner is gone; their keys."""
    table, now, closed = key.table, datetime.now(timezone.utc), []
    for row in owner_rows(conn, key, table.c.status == "running"):
        if not is_gone(row, now):
            continue
        reason = json.dumps({"stop_reason": f"interrupted: its process ({describe(row)}) is gone and left it "
                                            "unfinished"})
        done = conn.execute(update(table).where(key == row[key.name], table.c.status == "running",
                                                *same_owner(table, row))
                            .values(status="interrupted", finished_at=now,
                                    summary_json=func.coalesce(table.c.summary_json, reason)))
        if done.rowcount:
            closed.append(row[key.name])
    return closed


def stamp_heartbeat(conn: Connection, table: Table) -> None:
    """Stamp the running rows of `table` that this process owns."""
    mine = [table.c[name] == value for name, value in this_process().items()]
    conn.execute(update(table).where(table.c.status == "running", *mine)
                 .values(heartbeat_at=datetime.now(timezone.utc)))


class Heartbeat:
    """A daemon thread that stamps this process's running rows every `HEARTBEAT_S` until
    stopped. A failed stamp is tried again at the next beat: the job's own next write reports a
    store that has failed."""

    def __init__(self, beat):
        self._beat = beat
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # none yet, or forked
                self._thread = threading.Thread(target=self._loop, name="store-heartbeat", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - see the class docstring
                pass
