"""The store's schema, made and upgraded by frozen revisions applied in order, each recorded.

Each revision (`optimizer/store/revisions/`) writes out the DDL it runs and is never edited once
shipped, as in Simon Willison's llm: a store is what its applied revisions made, so revision 1
keeps making the first release's tables however `schema.py` changes, and a column added later
reaches old and new stores alike through the revision that adds it. A store says which revisions
it has in `schema_migrations` (one row per revision, by name, since the first release) and
`schema_version` (their number, so an older optimizer refuses a newer store). docs/concepts.md
says why this and not Alembic.
"""

from __future__ import annotations

import fcntl
import importlib
import os
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

from sqlalchemy import (Column, Connection, DateTime, Integer, MetaData, String, Table, func, insert, inspect, select,
                        update)

from optimizer.errors import ConfigError
from optimizer.store.address import sqlite_file
from optimizer.store.revisions import NAMES


def _revision(module: str) -> Callable[[Connection], None]:
    """The upgrade of `optimizer.store.revisions.<module>`, imported only when a store needs it
    (most commands open a store that is up to date)."""
    def upgrade(conn: Connection) -> None:
        importlib.import_module(f"optimizer.store.revisions.{module}").upgrade(conn)
    return upgrade


MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = [(name, _revision(f"r{name}")) for name in NAMES]
SCHEMA_VERSION = len(MIGRATIONS)

bookkeeping = MetaData()
"""The two tables that record a store's revisions, as the first release made them. Frozen like a
revision: every store, whatever its age, is recognised by them."""

applied_revisions = Table(
    "schema_migrations", bookkeeping,
    Column("name", String, primary_key=True),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)

version_row = Table(
    "schema_version", bookkeeping,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
)

MIGRATION_LOCK_KEY = 0x6F70_745F_6D69_6772  # "opt_migr"
"""The PostgreSQL advisory lock under which a store is migrated (any 64-bit number no other
program on the server uses)."""


@contextmanager
def sqlite_lock(url: str) -> Iterator[None]:
    """An exclusive `flock` on a file beside a SQLite database (`<file>.migration-lock`), held for
    the `with` block; nothing for another database or an in-memory one. A store is opened under
    it: SQLite neither waits nor retries when two connections switch a new file to WAL at once
    ("database is locked"), nor when two create the same table ("already exists"). The kernel
    lets go when the process ends, however it ends. The file stays: removing it would let a
    process lock a file no longer at the path while another locks a new one there."""
    path = sqlite_file(url)
    if path is None:
        yield
        return
    handle = os.open(f"{path}.migration-lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def refuse_newer(stored: int | None, where: str | None = None) -> None:
    """Refuse a store whose schema version `stored` is newer than this optimizer's: an older
    release must not write, or misread, the tables a newer one changed."""
    if stored is not None and stored > len(MIGRATIONS):
        raise ConfigError(f"the store has schema version {stored}, newer than this tool's {len(MIGRATIONS)}",
                          path=where, fix="upgrade the optimizer package, or set state_dir (env OPTIMIZER_STATE_DIR) "
                                          "to another folder")


def migrate(conn: Connection, *, target: int | None = None) -> list[str]:
    """Apply the first `target` revisions (all by default) that this database has not recorded,
    in order, each with its record; return their names. All of it is one transaction, on SQLite
    too, so a process killed halfway leaves the store as it found it. (A smaller `target` makes
    a store as an older release left it, for tests.)

    `conn` must be in a transaction. Processes that open a blank store at once (a team's jobs
    starting together, or commands started side by side) take turns, so the second finds the
    tables the first made instead of failing to make them again: on PostgreSQL each migrates
    under a transaction-scoped advisory lock; a SQLite store is opened under `sqlite_lock`."""
    target = len(MIGRATIONS) if target is None else target
    _begin(conn)
    bookkeeping.create_all(conn)
    stored = conn.execute(select(version_row.c.version)).scalar()
    refuse_newer(stored)
    done = set(conn.execute(select(applied_revisions.c.name)).scalars())
    applied = []
    for name, upgrade in MIGRATIONS[:target]:
        if name in done:
            continue
        upgrade(conn)
        conn.execute(insert(applied_revisions).values(name=name, applied_at=datetime.now(timezone.utc)))
        applied.append(name)
    if stored is None:
        conn.execute(insert(version_row).values(id=1, version=target))
    elif stored < target:
        conn.execute(update(version_row).values(version=target))
    return applied


def _begin(conn: Connection) -> None:
    """Take this connection's turn, and on SQLite open the transaction now: Python's sqlite3
    begins one only before the first INSERT, UPDATE or DELETE, so a `CREATE` or `ALTER` ahead of
    it would commit on its own. `BEGIN IMMEDIATE` also takes the write lock at once."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
    elif conn.dialect.name == "sqlite" and not conn.connection.dbapi_connection.in_transaction:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def table_names(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())
