"""0005_run_owners, the owner of a running run or iteration (host, pid, process start stamp) and
its heartbeat (`optimizer.store.ownership`); rows from before have them empty. Frozen: never edit
(see `optimizer.store.revisions`)."""

from __future__ import annotations

from sqlalchemy import Connection, DateTime, Integer, String

from optimizer.store.revisions.ops import add_columns


def upgrade(conn: Connection) -> None:
    for table in ("runs", "iterations"):
        add_columns(conn, table, {"owner_host": String(), "owner_pid": Integer(), "owner_start": String(),
                                  "heartbeat_at": DateTime(timezone=True)})
