"""Named, recorded schema migrations, applied in order. Never edit one that has shipped: add one."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

from sqlalchemy import Connection, Table, func, insert, inspect, select, update

from optimizer.errors import ConfigError
from optimizer.store import schema
from optimizer.store.ownership import OWNER_COLUMNS


def _initial(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.runs, schema.trials, schema.grader_results,
                                             schema.response_cache])


def _loop(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.iterations, schema.proposals])


def _judges(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.judge_calibrations])


def _nightly(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.ledger, schema.nightlies])


def _owners(conn: Connection) -> None:
    """The owner columns of running runs and iterations (see `optimizer.store.ownership`). A
    table made by an earlier migration from today's `schema` has them already; an older one gets
    them, empty on its rows."""
    add_missing_columns(conn, schema.runs, OWNER_COLUMNS)
    add_missing_columns(conn, schema.iterations, OWNER_COLUMNS)


def add_missing_columns(conn: Connection, table: Table, names: tuple[str, ...]) -> None:
    """Add those of `names`, as `table` defines them (nullable), that the stored table lacks."""
    stored = {column["name"] for column in inspect(conn).get_columns(table.name)}
    quote = conn.dialect.identifier_preparer.quote
    for name in names:
        if name not in stored:
            kind = table.c[name].type.compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(name)} {kind}")


MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = [
    ("0001_initial", _initial),
    ("0002_loop", _loop),
    ("0003_judge_calibrations", _judges),
    ("0004_ledger_nightly", _nightly),
    ("0005_run_owners", _owners),
]
SCHEMA_VERSION = len(MIGRATIONS)

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
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
    if not path or path == ":memory:":
        yield
        return
    handle = os.open(f"{path}.migration-lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def migrate(conn: Connection) -> list[str]:
    """Apply the migrations this database has not seen; return their names.

    `conn` must be in a transaction. Processes that open a blank store at once (a team's jobs
    starting together, or commands started side by side) take turns, so the second finds the
    tables the first made instead of failing to make them again: on PostgreSQL each migrates
    under a transaction-scoped advisory lock; a SQLite store is opened under `sqlite_lock`."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
    schema.metadata.create_all(conn, tables=[schema.schema_migrations, schema.schema_version])
    stored = conn.execute(select(schema.schema_version.c.version)).scalar()
    if stored is not None and stored > SCHEMA_VERSION:
        raise ConfigError(f"the store has schema version {stored}, newer than this tool's {SCHEMA_VERSION}",
                          fix="upgrade the optimizer package or point --state-dir elsewhere")
    done = set(conn.execute(select(schema.schema_migrations.c.name)).scalars())
    applied = []
    for name, step in MIGRATIONS:
        if name in done:
            continue
        step(conn)
        conn.execute(insert(schema.schema_migrations).values(name=name, applied_at=datetime.now(timezone.utc)))
        applied.append(name)
    version = conn.execute(select(schema.schema_version.c.version)).scalar()
    if version is None:
        conn.execute(insert(schema.schema_version).values(id=1, version=SCHEMA_VERSION))
    elif version != SCHEMA_VERSION:
        conn.execute(update(schema.schema_version).values(version=SCHEMA_VERSION))
    return applied


def table_names(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())
