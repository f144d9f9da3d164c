"""Named, recorded schema migrations, applied in order. Never edit one that has shipped: add one."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

from sqlalchemy import Connection, func, insert, inspect, select, update

from optimizer.errors import ConfigError
from optimizer.store import schema


def _initial(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.runs, schema.trials, schema.grader_results,
                                             schema.response_cache])


def _loop(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.iterations, schema.proposals])


def _judges(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.judge_calibrations])


def _nightly(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.ledger, schema.nightlies])


MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = [
    ("0001_initial", _initial),
    ("0002_loop", _loop),
    ("0003_judge_calibrations", _judges),
    ("0004_ledger_nightly", _nightly),
]
SCHEMA_VERSION = len(MIGRATIONS)

MIGRATION_LOCK_KEY = 0x6F70_745F_6D69_6772  # "opt_migr"
"""The PostgreSQL advisory lock under which a store is migrated (any 64-bit number no other
program on the server uses)."""


def migrate(conn: Connection) -> list[str]:
    """Apply the migrations this database has not seen; return their names.

    `conn` must be in a transaction. On PostgreSQL, processes that open a blank store at once
    (a team's jobs starting together) take turns: each migrates under a transaction-scoped
    advisory lock, so the second finds the tables the first made instead of failing to make them
    again. (SQLite has no such lock: two processes opening a blank SQLite file in the same instant
    may still race.)"""
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
