"""A SQLite store read through the standard library's `sqlite3`, for a command a user waits for
(`optimizer history`): importing SQLAlchemy alone costs a process about as much as the rest of
the command.

It reads what `optimizer history` reads, as the repositories of `Store` read it (times stay
SQLite's text; `tests/optimizer/store/test_quick.py` compares the two histories), and only a
store it can read as it is: a SQLite file that exists, opened read-only, at this optimizer's
schema version, with nothing running. For anything else (PostgreSQL, no store yet, an older
store to migrate, a newer one, a run or an iteration still running, any database error)
`read_quickly` returns None and the caller opens the `Store`, which migrates, checks and
reports faults as every other command does.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any, Callable, TypeVar

from optimizer.store.address import connect_read_only, sqlite_file
from optimizer.store.columns import decode
from optimizer.store.revisions import NAMES

T = TypeVar("T")

RUNNING = ("SELECT 1 FROM runs WHERE status = 'running' "
           "UNION ALL SELECT 1 FROM iterations WHERE status = 'running' LIMIT 1")
"""A run or an iteration still running. Its owner may be gone, and opening the `Store` closes
such rows as `interrupted` before they are shown, so the history is then read through it."""


class QuickStore:
    """The reads of `optimizer history` on one read-only connection, shaped like the `Store`'s
    repositories (`runs.rows`, `iterations.rows`, `proposals.rows`, `nightlies.rows`,
    `ledger.sums`), so the same code reads either."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.runs, self.iterations = _Runs(conn), _Table(conn, "iterations", "started_at")
        self.proposals, self.nightlies = _Table(conn, "proposals", "id"), _Table(conn, "nightlies", "started_at")
        self.ledger = _Ledger(conn)


def read_quickly(url: str, read: Callable[[QuickStore], T]) -> T | None:
    """`read` on a `QuickStore` of the SQLite store at `url`; None when the store is not one to
    read this way or reading fails (see the module's docstring)."""
    path = sqlite_file(url)
    if path is None or not path.is_file():
        return None
    try:
        with closing(connect_read_only(path)) as conn:
            conn.row_factory = sqlite3.Row
            version = conn.execute("SELECT version FROM schema_version").fetchone()
            if version is None or version[0] != len(NAMES) or conn.execute(RUNNING).fetchone():
                return None
            return read(QuickStore(conn))
    except sqlite3.Error:
        return None


class _Table:
    """Every row of one table, oldest first, its JSON columns decoded."""

    def __init__(self, conn: sqlite3.Connection, name: str, order: str):
        self._conn, self._name, self._order = conn, name, order

    def rows(self) -> list[dict[str, Any]]:
        query = f"SELECT * FROM {self._name} ORDER BY {self._order}"
        return [decode(row) for row in self._conn.execute(query)]


class _Runs:
    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def rows(self, *columns: str, last: int | None = None) -> list[dict[str, Any]]:
        """As `Runs.rows`: the named columns (all without), oldest first, the newest `last`."""
        shown = ", ".join(columns) if columns else "*"
        if last:
            query = f"SELECT {shown} FROM runs ORDER BY started_at DESC, run_id DESC LIMIT ?"
            return [decode(row) for row in self._conn.execute(query, (last,))][::-1]
        return [decode(row) for row in self._conn.execute(f"SELECT {shown} FROM runs ORDER BY started_at, run_id")]


class _Ledger:
    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def sums(self, key: str | None = None) -> list[dict[str, Any]]:
        """As `LedgerEntries.sums`."""
        groups = f"{key}, role" if key else "role"
        query = (f"SELECT {f'{key} AS key, ' if key else ''}role, SUM(cost_usd) AS cost_usd, "
                 "SUM(prompt_tokens + completion_tokens) AS tokens, SUM(calls) AS calls "
                 f"FROM ledger GROUP BY {groups} ORDER BY {groups}")
        return [{"key": None, **dict(row)} for row in self._conn.execute(query)]
